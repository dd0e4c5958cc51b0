package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
	bolt "go.etcd.io/bbolt"
)

// testOwner is an owner other than root: a made-up one as root (who may
// give files away), else the test's own user.
func testOwner() store.Owner {
	if os.Geteuid() == 0 {
		return store.Owner{UID: 1234, GID: 5678}
	}
	return store.ProcessOwner()
}

func fileOwner(t *testing.T, p string) store.Owner {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return store.Owner{UID: st.Uid, GID: st.Gid}
}

// ownerAt is the owner of the entry at a store path, through the inode API.
func ownerAt(t *testing.T, s *store.Store, comps ...string) store.Owner {
	t.Helper()
	ino := manifest.RootIno
	fi, err := s.StatIno(ino)
	for _, c := range comps {
		if err != nil {
			break
		}
		fi, err = s.Lookup(fi.Ino, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return store.Owner{UID: fi.UID, GID: fi.GID}
}

// TestOwnerRecordedAtInit: the owner given at init owns the store's files,
// the root directory, and what is created without a calling user (a put
// and the parents it creates, Mkdir); a caller given explicitly owns what
// it creates.
func TestOwnerRecordedAtInit(t *testing.T) {
	o := testOwner()
	dir := filepath.Join(t.TempDir(), "store")
	if err := store.InitAs(dir, store.DefaultChunkSize, o); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "kvfs.db"), filepath.Join(dir, "packs"), filepath.Join(dir, "spool")} {
		if got := fileOwner(t, p); got != o {
			t.Errorf("%s is owned by %v, want %v", p, got, o)
		}
	}
	// The store is o's now: root opens it only as an administrator would.
	s, err := store.Open(dir, store.Options{AnyOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer storetest.MustCheck(t, s)
	if s.Owner() != o {
		t.Fatalf("Owner() = %v, want %v", s.Owner(), o)
	}
	if got := ownerAt(t, s); got != o {
		t.Errorf("root directory owned by %v, want %v", got, o)
	}
	if _, _, err := s.Put(ctx, bytes.NewReader([]byte("x")), 1, "a/b/f", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]string{{"a"}, {"a", "b"}, {"a", "b", "f"}} {
		if got := ownerAt(t, s, p...); got != o {
			t.Errorf("put's %v owned by %v, want %v", p, got, o)
		}
	}
	if err := s.Mkdir("c/d", 0o755, true); err != nil {
		t.Fatal(err)
	}
	if got := ownerAt(t, s, "c", "d"); got != o {
		t.Errorf("Mkdir's c/d owned by %v, want %v", got, o)
	}
	caller := store.Owner{UID: 42, GID: 43}
	if _, _, err := s.Put(ctx, bytes.NewReader([]byte("y")), 1, "g", store.PutOptions{Owner: &caller}); err != nil {
		t.Fatal(err)
	}
	if got := ownerAt(t, s, "g"); got != caller {
		t.Errorf("put with an owner: owned by %v, want %v", got, caller)
	}
	if _, err := s.MkdirAt(manifest.RootIno, "h", 0o755, caller); err != nil {
		t.Fatal(err)
	}
	if got := ownerAt(t, s, "h"); got != caller {
		t.Errorf("MkdirAt by a caller: owned by %v, want %v", got, caller)
	}
}

// makeLegacy turns the store in dir into one made before owners were
// recorded: no owner in the index, the root directory 0:0.
func makeLegacy(t *testing.T, dir string) {
	t.Helper()
	if err := eraseOwnerOnly(dir); err != nil {
		t.Fatal(err)
	}
	db, err := manifest.Open(filepath.Join(dir, "kvfs.db"), false, manifest.Params{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *manifest.Tx) error {
		if _, _, ok := tx.Owner(); ok {
			t.Fatal("owner still recorded")
		}
		root, err := tx.Inode(manifest.RootIno)
		if err != nil {
			return err
		}
		root.UID, root.GID = 0, 0
		return tx.PutInode(root)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func recordedOwner(t *testing.T, dir string) (store.Owner, bool) {
	t.Helper()
	db, err := manifest.Open(filepath.Join(dir, "kvfs.db"), false, manifest.Params{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var o store.Owner
	var ok bool
	db.View(func(tx *manifest.Tx) error {
		o.UID, o.GID, ok = tx.Owner()
		return nil
	})
	return o, ok
}

// TestOwnerOfLegacyStore: a store created before owners were recorded
// takes the owner of its directory, records it at open, and gives it the
// root directory; a root directory chowned since keeps its owner.
func TestOwnerOfLegacyStore(t *testing.T) {
	o := testOwner()
	dir := filepath.Join(t.TempDir(), "store")
	if err := store.InitAs(dir, store.DefaultChunkSize, o); err != nil {
		t.Fatal(err)
	}
	makeLegacy(t, dir)
	s, err := store.Open(dir, store.Options{AnyOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Owner() != o {
		t.Errorf("Owner() = %v, want the store directory's %v", s.Owner(), o)
	}
	if got := ownerAt(t, s); got != o {
		t.Errorf("root directory owned by %v, want %v", got, o)
	}
	if _, _, err := s.Put(ctx, bytes.NewReader([]byte("x")), 1, "p/f", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ownerAt(t, s, "p", "f"); got != o {
		t.Errorf("put's p/f owned by %v, want %v", got, o)
	}
	storetest.MustCheck(t, s)
	if got, ok := recordedOwner(t, dir); !ok || got != o {
		t.Errorf("recorded owner after open: %v %v, want %v", got, ok, o)
	}

	// A root directory with an owner of its own (chowned through a
	// mount) keeps it when the owner is recorded.
	makeLegacy(t, dir)
	chowned := uint32(77)
	s, err = store.Open(dir, store.Options{AnyOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAttr(manifest.RootIno, store.AttrChange{UID: &chowned}); err != nil {
		t.Fatal(err)
	}
	storetest.MustCheck(t, s)
	if err := eraseOwnerOnly(dir); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(dir, store.Options{AnyOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer storetest.MustCheck(t, s)
	if got := ownerAt(t, s); got.UID != chowned {
		t.Errorf("root directory chowned to %d is owned by %v after the owner was recorded", chowned, got)
	}
}

// eraseOwnerOnly removes the recorded owner and nothing else.
func eraseOwnerOnly(dir string) error {
	b, err := bolt.Open(filepath.Join(dir, "kvfs.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	defer b.Close()
	return b.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("owner")) })
}
