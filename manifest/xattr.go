package manifest

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Extended attributes live in their own bucket, one key per attribute
// (inode number ‖ name), not in the inode record: a record that held them
// had to be decoded by every stat and rewritten whole by every setxattr,
// so 400 values of 64 KiB made each setxattr write 25 MiB and each stat
// decode it. Here a setxattr writes one value and a stat reads none.
//
// Stores made before kept them inline (tagXattrs of the inode record);
// such records are still read, and the store moves their attributes here
// the first time it changes one of them (MigrateXattrs).

// XattrEntry is one extended attribute's name and value size.
type XattrEntry struct {
	Name string
	Size int
}

func xattrKey(ino uint64, name string) []byte { return append(u64key(ino), name...) }

// Xattr returns the value of attribute name of inode ino from the bucket,
// or ErrNotFound. The value is a copy. Inline attributes of legacy records
// are the caller's to consult (Inode.Xattrs).
func (t *Tx) Xattr(ino uint64, name string) ([]byte, error) {
	key := xattrKey(ino, name)
	k, v := t.b(bucketXattrs).Cursor().Seek(key)
	if !bytes.Equal(k, key) {
		return nil, fmt.Errorf("xattr %q of inode %d: %w", name, ino, ErrNotFound)
	}
	return append([]byte{}, v...), nil
}

// Xattrs lists the attributes of inode ino in the bucket, by name.
func (t *Tx) Xattrs(ino uint64) []XattrEntry {
	var out []XattrEntry
	prefix := u64key(ino)
	if t.ch != nil {
		t.ch.ino(ino) // a cursor's deletions are not noted
	}
	c := t.b(bucketXattrs).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		out = append(out, XattrEntry{Name: string(k[8:]), Size: len(v)})
	}
	return out
}

// PutXattr sets attribute name of inode ino to value (which may be empty).
func (t *Tx) PutXattr(ino uint64, name string, value []byte) error {
	if name == "" {
		return fmt.Errorf("xattr of inode %d: %w: empty name", ino, ErrBadInode)
	}
	if err := checkName("xattr name", name, maxXattrName, "\x00"); err != nil {
		return fmt.Errorf("xattr of inode %d: %w: %w", ino, ErrBadInode, err)
	}
	if len(value) > maxXattrValue {
		return fmt.Errorf("xattr %q of inode %d: %w: value of %d bytes", name, ino, ErrBadInode, len(value))
	}
	if value == nil {
		value = []byte{}
	}
	return t.b(bucketXattrs).Put(xattrKey(ino, name), value)
}

// DeleteXattr removes attribute name of inode ino from the bucket.
func (t *Tx) DeleteXattr(ino uint64, name string) error {
	return t.b(bucketXattrs).Delete(xattrKey(ino, name))
}

// DeleteXattrs removes every attribute of inode ino from the bucket.
func (t *Tx) DeleteXattrs(ino uint64) error {
	prefix := u64key(ino)
	c := t.b(bucketXattrs).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// XattrValues returns every attribute of inode ino: the bucket's, and the
// inline ones of its legacy record (inline, if not nil; the bucket's win).
// A commit makes a new inode for the new content of the same file, which
// keeps its attributes (PutXattrs).
func (t *Tx) XattrValues(ino uint64, inline map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(inline))
	for k, v := range inline {
		out[k] = v
	}
	prefix := u64key(ino)
	c := t.b(bucketXattrs).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		out[string(k[8:])] = append([]byte{}, v...)
	}
	return out
}

// PutXattrs sets the attributes of inode ino.
func (t *Tx) PutXattrs(ino uint64, values map[string][]byte) error {
	for k, v := range values {
		if err := t.PutXattr(ino, k, v); err != nil {
			return err
		}
	}
	return nil
}

// MigrateXattrs moves the inline attributes of a legacy record into the
// bucket and rewrites the record without them. It does nothing for a
// record without inline attributes. An attribute already in the bucket
// wins over the inline one (it was set later).
func (t *Tx) MigrateXattrs(n *Inode) error {
	if len(n.Xattrs) == 0 {
		return nil
	}
	for k, v := range n.Xattrs {
		if _, err := t.Xattr(n.Ino, k); err == nil {
			continue
		}
		if err := t.PutXattr(n.Ino, k, v); err != nil {
			return err
		}
	}
	n.Xattrs = nil
	return t.PutInode(n)
}

// ForEachXattrIno calls fn once for each inode number that has attributes
// in the bucket, in order.
func (t *Tx) ForEachXattrIno(fn func(ino uint64) error) error {
	c := t.b(bucketXattrs).Cursor()
	for k, _ := c.First(); k != nil; {
		if len(k) < 8 {
			return fmt.Errorf("xattr key %x: shorter than an inode number", k)
		}
		ino := binary.BigEndian.Uint64(k)
		if err := fn(ino); err != nil {
			return err
		}
		k, _ = c.Seek(u64key(ino + 1))
		if ino == ^uint64(0) {
			break
		}
	}
	return nil
}
