package manifest

import (
	"encoding/binary"
	"fmt"
)

// keyOwner records the store's owner: uid ‖ gid, big-endian u32 each. A
// store created before owners were recorded has none.
var keyOwner = []byte("owner")

// Owner returns the store's recorded owner; ok is false when none is
// recorded (a store created before owners were).
func (t *Tx) Owner() (uid, gid uint32, ok bool) {
	v := t.b(bucketMeta).Get(keyOwner)
	if len(v) != 8 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(v), binary.BigEndian.Uint32(v[4:]), true
}

// SetOwner records the store's owner.
func (t *Tx) SetOwner(uid, gid uint32) error {
	v := binary.BigEndian.AppendUint32(nil, uid)
	v = binary.BigEndian.AppendUint32(v, gid)
	if err := t.b(bucketMeta).Put(keyOwner, v); err != nil {
		return fmt.Errorf("record owner %d:%d: %w", uid, gid, err)
	}
	return nil
}
