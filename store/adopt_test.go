package store_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// spoolFile writes b to a new file in the store's spool directory, as the
// filesystem does for a file being written.
func spoolFile(t *testing.T, s *store.Store, b []byte) *os.File {
	t.Helper()
	f, err := os.CreateTemp(filepath.Join(s.Dir(), "spool"), "w-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCommitAdoptsNewSpool(t *testing.T) {
	// Spools this small are copied into a shared pack by default.
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{AdoptMinBytes: 1}})
	shared := randBytes(40000, 1)
	put(t, s, "old", shared)
	fi, err := s.CreateAt(manifest.RootIno, "f", 0o644, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	// Mostly new, with a duplicate run and a zero run inside.
	b := append(append(randBytes(49*4096, 2), shared[:16384]...), make([]byte, 20480)...)
	b = append(b, randBytes(100000, 3)...)
	sp := spoolFile(t, s, b)
	nfi, st, err := s.CommitIno(ctx, fi.Ino, sp, int64(len(b)), store.CommitOptions{Mtime: time.Now(), Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Adopted || nfi.Ino == fi.Ino || nfi.Size != int64(len(b)) {
		t.Fatalf("stats %+v, info %+v", st, nfi)
	}
	if _, err := os.Stat(sp.Name()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("adopted spool still in the spool directory")
	}
	if got := get(t, s, "f"); !bytes.Equal(got, b) {
		t.Fatal("adopted file reads back wrong")
	}
	stats, _ := s.Stats()
	if stats.DeadBytes < 16384 {
		t.Fatalf("duplicate run not counted dead: %+v", stats)
	}
	// The cleanup check verifies every chunk and that none is punched.
}

func TestCommitCopiesMostlyDuplicateSpool(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{AdoptMinBytes: 1}})
	shared := randBytes(100000, 1)
	put(t, s, "old", shared)
	fi, _ := s.CreateAt(manifest.RootIno, "f", 0o644, store.Owner{})
	b := append(bytes.Clone(shared), randBytes(5000, 9)...)
	sp := spoolFile(t, s, b)
	_, st, err := s.CommitIno(ctx, fi.Ino, sp, int64(len(b)), store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Adopted || st.NewBytes > 9000 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := os.Stat(sp.Name()); err != nil {
		t.Fatalf("copied spool was moved: %v", err)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, b) {
		t.Fatal("reads back wrong")
	}
}
