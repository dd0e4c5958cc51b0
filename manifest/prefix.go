package manifest

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The prefix index (docs/PREFIX.md) finds committed snapshots by token-chain
// key: bucketPrefix maps key ‖ ino to the number of token groups the key
// covers, and bucketPrefixIno maps each indexed inode to its record, which
// lists its keys so that they go with the file. The keys depend only on the
// snapshot's header (model, fingerprint, namespace, tokens), never on its
// path: a rename changes nothing here.

// PrefixKeyLen is the length of a chain key (a sha256).
const PrefixKeyLen = 32

// ModelGroups is the group count recorded for a snapshot's model key, which
// names no prefix; the namespace root h0 is recorded with 0 groups.
const ModelGroups = ^uint32(0)

// keyPrefixIndexed in bucketMeta marks an index whose prefix buckets cover
// every snapshot: set on creation, and once a store made before them has
// been indexed (store.Open).
var keyPrefixIndexed = []byte("prefixIndexed")

// PrefixRecord is what a lookup needs of an indexed snapshot besides its
// tokens (kept in the snapshot index).
type PrefixRecord struct {
	Trimmable   bool  // FORMAT.md §7 headerTrimmable over every cache
	MinReusable int64 // the max minimumReusableOffset over its caches
	// Keys are the model key, then h0 … h(n) of its tokens, n = len-1.
	Keys [][PrefixKeyLen]byte
}

func (r *PrefixRecord) marshal() []byte {
	b := make([]byte, 0, 9+PrefixKeyLen*len(r.Keys))
	if r.Trimmable {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.MinReusable))
	for _, k := range r.Keys {
		b = append(b, k[:]...)
	}
	return b
}

func unmarshalPrefixRecord(v []byte) (*PrefixRecord, error) {
	if len(v) < 9 || (len(v)-9)%PrefixKeyLen != 0 {
		return nil, fmt.Errorf("prefix record of %d bytes: malformed", len(v))
	}
	r := &PrefixRecord{Trimmable: v[0] == 1, MinReusable: int64(binary.BigEndian.Uint64(v[1:9]))}
	for p := v[9:]; len(p) > 0; p = p[PrefixKeyLen:] {
		r.Keys = append(r.Keys, [PrefixKeyLen]byte(p[:PrefixKeyLen]))
	}
	return r, nil
}

func prefixKey(k [PrefixKeyLen]byte, ino uint64) []byte { return append(k[:], u64key(ino)...) }

// AddPrefix indexes a committed snapshot under its chain keys: r.Keys[0] is
// its model key, r.Keys[1+k] covers k groups.
func (t *Tx) AddPrefix(ino uint64, r *PrefixRecord) error {
	if err := t.RemovePrefix(ino); err != nil {
		return err
	}
	b := t.b(bucketPrefix)
	for i, k := range r.Keys {
		g := ModelGroups
		if i > 0 {
			g = uint32(i - 1)
		}
		if err := b.Put(prefixKey(k, ino), binary.BigEndian.AppendUint32(nil, g)); err != nil {
			return err
		}
	}
	return t.b(bucketPrefixIno).Put(u64key(ino), r.marshal())
}

// RemovePrefix removes an inode's chain keys, if it has any.
func (t *Tx) RemovePrefix(ino uint64) error {
	r, err := t.Prefix(ino)
	if err == ErrNotFound {
		return nil
	} else if err != nil {
		return err
	}
	b := t.b(bucketPrefix)
	for _, k := range r.Keys {
		if err := b.Delete(prefixKey(k, ino)); err != nil {
			return err
		}
	}
	return t.b(bucketPrefixIno).Delete(u64key(ino))
}

// Prefix returns an indexed snapshot's record, or ErrNotFound.
func (t *Tx) Prefix(ino uint64) (*PrefixRecord, error) {
	v := t.b(bucketPrefixIno).Get(u64key(ino))
	if v == nil {
		return nil, ErrNotFound
	}
	return unmarshalPrefixRecord(v)
}

// PrefixInodes calls fn, in inode order, with each snapshot indexed under
// key and the group count the key covers (ModelGroups for a model key),
// until fn returns false.
func (t *Tx) PrefixInodes(key [PrefixKeyLen]byte, fn func(ino uint64, groups uint32) bool) {
	c := t.b(bucketPrefix).Cursor()
	for k, v := c.Seek(key[:]); k != nil && bytes.HasPrefix(k, key[:]); k, v = c.Next() {
		if len(k) == PrefixKeyLen+8 && len(v) == 4 && !fn(binary.BigEndian.Uint64(k[PrefixKeyLen:]), binary.BigEndian.Uint32(v)) {
			return
		}
	}
}

// PrefixGroups returns the number of token groups key covers for
// snapshot ino, and whether ino is indexed under key at all.
func (t *Tx) PrefixGroups(key [PrefixKeyLen]byte, ino uint64) (uint32, bool) {
	v := t.b(bucketPrefix).Get(prefixKey(key, ino))
	if len(v) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(v), true
}

// SnapshotTokens returns the tokens (u32 LE) indexed for a snapshot inode
// of this layout key, or ErrNotFound. They are valid only in the
// transaction.
func (t *Tx) SnapshotTokens(layout string, ino uint64) ([]byte, error) {
	v := t.b(bucketSnaps).Get(snapKey(layout, ino))
	if v == nil {
		return nil, ErrNotFound
	}
	return v, nil
}

// PrefixIndexed reports whether the prefix index covers every snapshot.
func (t *Tx) PrefixIndexed() bool { return t.b(bucketMeta).Get(keyPrefixIndexed) != nil }

// SetPrefixIndexed records that the prefix index covers every snapshot.
func (t *Tx) SetPrefixIndexed() error { return t.b(bucketMeta).Put(keyPrefixIndexed, []byte{1}) }

// ResetPrefixIndex empties the prefix index and clears its mark, as in a
// store made before it: the next open rebuilds it (store.Open).
func (t *Tx) ResetPrefixIndex() error {
	var inos []uint64
	if err := t.b(bucketPrefixIno).ForEach(func(k, _ []byte) error {
		inos = append(inos, binary.BigEndian.Uint64(k))
		return nil
	}); err != nil {
		return err
	}
	for _, ino := range inos {
		if err := t.RemovePrefix(ino); err != nil {
			return err
		}
	}
	return t.b(bucketMeta).Delete(keyPrefixIndexed)
}
