package store_test

import (
	"bytes"
	"errors"
	"io/fs"
	"testing"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestAdoptBlobAccess: a blob is adopted only by a caller who may create in
// the blocks directory and read one of the blob's files where it is; a
// refused adoption creates nothing, and an adopted entry is the caller's.
func TestAdoptBlobAccess(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 16384})
	block := randBytes(50000, 3)
	h := sha256hex(block)
	put(t, s, "private/blocks/"+h, block)
	user := &store.Cred{UID: 1000, GID: 1000}
	setMode := func(path string, m fs.FileMode, uid, gid uint32) {
		t.Helper()
		fi, err := s.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetAttr(fi.Ino, store.AttrChange{Mode: &m, UID: &uid, GID: &gid}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"u/blocks", "pub/blocks"} {
		if err := s.Mkdir(d, 0o755, true); err != nil {
			t.Fatal(err)
		}
	}
	setMode("private", fs.ModeDir|0o700, 0, 0)
	setMode("private/blocks/"+h, 0o600, 0, 0)
	setMode("u", fs.ModeDir|0o755, 1000, 1000)
	setMode("u/blocks", fs.ModeDir|0o755, 1000, 1000)
	ublocks, _ := s.Stat("u/blocks")
	pub, _ := s.Stat("pub/blocks")

	adopt := func(dir *store.FileInfo, c *store.Cred) error {
		t.Helper()
		_, err := s.AdoptBlob(dir.Ino, h, c)
		return err
	}
	// The only file holding the blob is in a 0700 directory of root's.
	if err := adopt(ublocks, user); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("adopt from a directory the caller cannot search: %v", err)
	}
	// Searchable, but the file is 0600 root's.
	setMode("private", fs.ModeDir|0o755, 0, 0)
	if err := adopt(ublocks, user); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("adopt of a file the caller cannot read: %v", err)
	}
	// Readable where it is, but pub/blocks is root's 0755: no entry.
	setMode("private/blocks/"+h, 0o644, 0, 0)
	if err := adopt(pub, user); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("adopt into a directory the caller cannot write: %v", err)
	}
	if _, err := s.Stat("pub/blocks/" + h); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused adoption created an entry: %v", err)
	}
	// Readable, and the caller's own directory: adopted, as the caller's.
	if err := adopt(ublocks, user); err != nil {
		t.Fatal(err)
	}
	fi, err := s.Lookup(ublocks.Ino, h)
	if err != nil || fi.UID != 1000 || fi.GID != 1000 {
		t.Fatalf("adopted entry: %+v, %v", fi, err)
	}
	if got := get(t, s, "u/blocks/"+h); !bytes.Equal(got, block) {
		t.Fatal("adopted block reads back wrong")
	}
	// Once no file holds the blob (its names removed, as an engine's
	// collect does), who may read it is who could read its last file: the
	// user, in u/blocks, again; not another user with a directory of
	// their own.
	for _, p := range []string{"private/blocks/", "u/blocks/"} {
		if err := s.Remove(p + h); err != nil {
			t.Fatal(err)
		}
	}
	other := &store.Cred{UID: 2000, GID: 2000}
	if err := s.Mkdir("o/blocks", 0o755, true); err != nil {
		t.Fatal(err)
	}
	setMode("o/blocks", fs.ModeDir|0o755, 2000, 2000)
	oblocks, _ := s.Stat("o/blocks")
	if err := adopt(oblocks, other); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("another user adopted a blob whose last file was 0600 the user's: %v", err)
	}
	if err := adopt(ublocks, user); err != nil {
		t.Fatalf("the user could not adopt their own blob again: %v", err)
	}
	if err := s.Remove("u/blocks/" + h); err != nil {
		t.Fatal(err)
	}
	// Root adopts anywhere; the daemon (nil) too.
	if err := adopt(pub, &store.Cred{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := s.Lookup(pub.Ino, h); err != nil || fi.UID != 0 {
		t.Fatalf("root's adopted entry: %+v, %v", fi, err)
	}
}
