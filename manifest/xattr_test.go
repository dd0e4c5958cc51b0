package manifest

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
)

// TestXattrBucket: attributes are kept one key each, apart from the inode
// record (which a set leaves as it was), neighbours' keys do not mix (inode
// 1's and 256's), and DeleteInode drops them with the inode.
func TestXattrBucket(t *testing.T) { inBothModes(t, testXattrBucket) }

func testXattrBucket(t *testing.T, open opener) {
	db, err := open(filepath.Join(t.TempDir(), "db"), true, Params{ChunkSize: 4096}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	big := bytes.Repeat([]byte("v"), maxXattrValue)
	err = db.Update(func(tx *Tx) error {
		for _, ino := range []uint64{2, 256} {
			if err := tx.PutInode(&Inode{Ino: ino, Mode: 0o644}); err != nil {
				return err
			}
		}
		before := append([]byte{}, tx.b(bucketInodes).Get(u64key(2))...)
		for _, k := range []string{"user.b", "user.a", "user.empty"} {
			v := big
			if k == "user.empty" {
				v = nil
			}
			if err := tx.PutXattr(2, k, v); err != nil {
				return err
			}
		}
		if err := tx.PutXattr(256, "user.z", []byte("z")); err != nil {
			return err
		}
		if !bytes.Equal(tx.b(bucketInodes).Get(u64key(2)), before) {
			t.Error("setting an xattr rewrote the inode record")
		}
		got := tx.Xattrs(2)
		if len(got) != 3 || got[0] != (XattrEntry{"user.a", len(big)}) || got[2] != (XattrEntry{"user.empty", 0}) {
			t.Errorf("Xattrs(2) = %v", got)
		}
		if v, err := tx.Xattr(2, "user.empty"); err != nil || len(v) != 0 {
			t.Errorf("empty value: %q, %v", v, err)
		}
		if _, err := tx.Xattr(2, "user.z"); !errors.Is(err, ErrNotFound) {
			t.Errorf("another inode's attribute: %v", err)
		}
		if err := tx.PutXattr(2, "user.x", append(big, 'v')); !errors.Is(err, ErrBadInode) {
			t.Errorf("value over the limit: %v", err)
		}
		var inos []uint64
		tx.ForEachXattrIno(func(ino uint64) error { inos = append(inos, ino); return nil })
		if len(inos) != 2 || inos[0] != 2 || inos[1] != 256 {
			t.Errorf("ForEachXattrIno: %v", inos)
		}
		n, err := tx.Inode(2)
		if err != nil {
			return err
		}
		if err := tx.DeleteInode(n); err != nil {
			return err
		}
		if got := tx.Xattrs(2); len(got) != 0 {
			t.Errorf("after DeleteInode: %v", got)
		}
		if got := tx.Xattrs(256); len(got) != 1 {
			t.Errorf("neighbour after DeleteInode: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateXattrs: a legacy record's inline attributes move to the
// bucket, and the record is rewritten without them.
func TestMigrateXattrs(t *testing.T) { inBothModes(t, testMigrateXattrs) }

func testMigrateXattrs(t *testing.T, open opener) {
	db, err := open(filepath.Join(t.TempDir(), "db"), true, Params{ChunkSize: 4096}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *Tx) error {
		if err := tx.PutInode(&Inode{Ino: 2, Mode: 0o644, Xattrs: map[string][]byte{"user.a": []byte("inline"), "user.b": []byte("old")}}); err != nil {
			return err
		}
		if err := tx.PutXattr(2, "user.b", []byte("newer")); err != nil {
			return err
		}
		n, err := tx.Inode(2)
		if err != nil {
			return err
		}
		if err := tx.MigrateXattrs(n); err != nil {
			return err
		}
		if n, err = tx.Inode(2); err != nil || n.Xattrs != nil {
			t.Errorf("record after migration: %v, %v", n, err)
		}
		vals := tx.XattrValues(2, nil)
		if string(vals["user.a"]) != "inline" || string(vals["user.b"]) != "newer" || len(vals) != 2 {
			t.Errorf("migrated: %q", vals)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
