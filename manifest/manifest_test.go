package manifest

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blockstore"
)

func TestManifestEncoding(t *testing.T) {
	a, b := blockstore.Sum([]byte("a")), blockstore.Sum([]byte("b"))
	m := Manifest{{ID: a, Len: 10}, {Zero: true, Len: 5}, {Zero: true, Len: 7}, {ID: b, Len: 1 << 40}, {ID: a, Len: 10}}
	enc, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Manifest
	if err := got.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	want := Manifest{{ID: a, Len: 10}, {Zero: true, Len: 12}, {ID: b, Len: 1 << 40}, {ID: a, Len: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip %v", got)
	}
	// Merged zero runs give one encoding, so one ID, for equal content.
	if m.ID() != want.ID() || m.Size() != want.Size() || len(m.Chunks()) != 2 {
		t.Fatal("canonical encoding differs")
	}
	for _, bad := range [][]byte{nil, {2}, {1, 0, 5}, {1, 0, 5, 1, 2}, {1, 7, 1}, {1, 1, 0}} {
		var x Manifest
		if err := x.UnmarshalBinary(bad); err == nil {
			t.Errorf("decoded %v", bad)
		}
	}
	if _, err := (Manifest{{Len: 0}}).MarshalBinary(); err == nil {
		t.Error("encoded an empty extent")
	}
}

func TestDB(t *testing.T) { inBothModes(t, testDB) }

func testDB(t *testing.T, open opener) {
	path := filepath.Join(t.TempDir(), "kvfs.db")
	if _, err := open(path, false, Params{}, time.Second); err == nil {
		t.Fatal("opened a missing index without create")
	}
	db, err := open(path, true, Params{ChunkSize: 4096}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id := blockstore.Sum([]byte("x"))
	err = db.Update(func(tx *Tx) error {
		if tx.Params().ChunkSize != 4096 {
			t.Error("params not stored")
		}
		ino, _ := tx.NextIno()
		n := &Inode{Ino: ino, Size: 3, Xattrs: map[string][]byte{"user.a": []byte("b")}, Blob: "h", Layout: "L"}
		tx.PutInode(n)
		tx.Link(RootIno, "f", ino)
		tx.PutManifest(ino, Manifest{{ID: id, Len: 3}})
		tx.PutChunk(id, Chunk{Loc: blockstore.Loc{Pack: 1, Off: 0, Len: 3}, Refs: 2})
		tx.PutPack(1, Pack{Committed: 3})
		tx.AddBlob("h", ino)
		tx.AddSnapshot("L", ino, []uint32{7, 8})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = open(path, false, Params{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *Tx) error {
		ino, err := tx.Lookup(RootIno, "f")
		if err != nil {
			return err
		}
		n, err := tx.Inode(ino)
		if err != nil || string(n.Xattrs["user.a"]) != "b" {
			t.Errorf("inode %+v %v", n, err)
		}
		if b, err := tx.Blob("h"); err != nil || b != ino {
			t.Errorf("blob index: %d %v", b, err)
		}
		var toks []byte
		tx.Snapshots("L", func(i uint64, tb []byte) error { toks = append(toks, tb...); return nil })
		if len(toks) != 8 {
			t.Errorf("snapshot index: %v", toks)
		}
		freed, err := tx.Release([]blockstore.ID{id})
		if err != nil || len(freed) != 0 {
			t.Errorf("first release freed %v %v", freed, err)
		}
		freed, err = tx.Release([]blockstore.ID{id})
		if err != nil || len(freed) != 1 {
			t.Errorf("second release freed %v %v", freed, err)
		}
		if p, _ := tx.Pack(1); p.Dead != 3 {
			t.Errorf("dead bytes %d", p.Dead)
		}
		if _, err := tx.Release([]blockstore.ID{id}); !errors.Is(err, ErrNotFound) {
			t.Errorf("release of a freed chunk: %v", err)
		}
		if err := tx.DeleteInode(n); err != nil {
			return err
		}
		if _, err := tx.Blob("h"); !errors.Is(err, ErrNotFound) {
			t.Error("blob index kept a deleted inode")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(path, false, Params{}, 50*time.Millisecond); err == nil {
		t.Fatal("second opener got the lock")
	}
}
