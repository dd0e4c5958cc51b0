package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// TestReleasedBeforeCommit: chunks that an ingest planned to reuse are
// released (and punched) between chunking and commit; the commit notices
// and writes them again from the source.
func TestReleasedBeforeCommit(t *testing.T) {
	s, _ := newTestStore(t)
	b := make([]byte, 50000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	ctx := context.Background()
	if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "a", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	s.beforeCommit = func() {
		s.beforeCommit = nil
		if err := s.Remove("a"); err != nil {
			t.Error(err)
		}
	}
	_, st, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "b", PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.NewBytes != int64(len(b)) {
		t.Fatalf("rewrote %d bytes, want all %d", st.NewBytes, len(b))
	}
	f, err := s.Open("b")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(b))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("b reads back wrong: %v", err)
	}
	f.Close()
	if err := s.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestParentReleasedBeforeCommit: a file's chunks that hashed to its
// parent's are taken as stored without asking the index (the parent's
// rows of a llama.cpp file); the parent is removed between chunking and
// commit, and the commit writes them again from the source.
func TestParentReleasedBeforeCommit(t *testing.T) {
	s, _ := newTestStore(t)
	spec := llamastatetest.Spec{Layers: 2, KRow: 1024, VEl: 2, VChannels: 256}
	tokens := make([]uint32, 3000)
	for i := range tokens {
		tokens[i] = uint32(i*13 + 5)
	}
	ctx := context.Background()
	parent := llamastatetest.Write(spec, tokens[:2000])
	if _, _, err := s.Put(ctx, bytes.NewReader(parent), int64(len(parent)), "parent", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	s.beforeCommit = func() {
		s.beforeCommit = nil
		if err := s.Remove("parent"); err != nil {
			t.Error(err)
		}
	}
	child := llamastatetest.Write(spec, tokens)
	_, st, err := s.Put(ctx, bytes.NewReader(child), int64(len(child)), "child", PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Parent == 0 || st.ParentReused == 0 || st.NewBytes < int64(len(child))*9/10 {
		t.Fatalf("stats %+v: want the parent's rows matched, then written again (%d bytes)", st, len(child))
	}
	f, err := s.Open("child")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(child))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, child) {
		t.Fatalf("child reads back wrong: %v", err)
	}
	f.Close()
	if err := s.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestTruncatedMappedSource: a source file that shrinks under its mapping
// fails the ingest with errSourceChanged instead of crashing the process.
func TestTruncatedMappedSource(t *testing.T) {
	p := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, ok := mapSource(f, 0, 1<<20)
	if !ok {
		t.Fatal("mapSource failed on a regular file")
	}
	defer m.close()
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	err = guardFault(func() error {
		_ = isZero(m.data[1<<19:])
		return nil
	})
	if !errors.Is(err, errSourceChanged) {
		t.Fatalf("err = %v, want errSourceChanged", err)
	}
}

// TestAdoptedSpoolReturnedOnFailure: if the commit fails after the spool
// became a pack (here: the file was removed meanwhile), the spool is given
// back, whole, to its writer.
func TestAdoptedSpoolReturnedOnFailure(t *testing.T) {
	s, dir := newTestStore(t)
	s.adoptMin = 1
	fi, err := s.CreateAt(1, "f", 0o644, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 100000)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	sp, err := os.CreateTemp(filepath.Join(dir, "spool"), "w-")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	sp.Write(b)
	s.beforeCommit = func() {
		s.beforeCommit = nil
		if err := s.RemoveAt(1, "f", false); err != nil {
			t.Error(err)
		}
	}
	_, _, err = s.CommitIno(context.Background(), fi.Ino, sp, int64(len(b)), CommitOptions{Adopt: true})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("commit of a removed file: %v", err)
	}
	got, err := os.ReadFile(sp.Name())
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("spool not given back whole: %v", err)
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// newTestStore creates and opens a store with 4 KiB chunks, closed at the
// end of the test; the caller checks it.
func newTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// TestAdoptedSpoolKeepsDuplicatesUntilCommit: an adopted spool's
// duplicate chunks stay in it until the commit succeeds. Here the file
// they duplicate is removed before the commit, so the commit must write
// them again from the spool; and a commit that fails gives the spool back
// to a writer that commits it again (on a full disk, at close and again at
// release), which must still hold every byte.
func TestAdoptedSpoolKeepsDuplicatesUntilCommit(t *testing.T) {
	s, dir := newTestStore(t)
	s.adoptMin = 1
	r := rand.New(rand.NewPCG(5, 6))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	a := rnd(40960)
	if _, _, err := s.Put(context.Background(), bytes.NewReader(a), int64(len(a)), "a", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fi, err := s.CreateAt(1, "f", 0o644, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	b := append(append([]byte{}, a[:16384]...), rnd(100000)...)
	sp, err := os.CreateTemp(filepath.Join(dir, "spool"), "w-")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	sp.Write(b)
	s.beforeCommit = func() {
		s.beforeCommit = nil
		if err := s.Remove("a"); err != nil {
			t.Error(err)
		}
	}
	_, st, err := s.CommitIno(context.Background(), fi.Ino, sp, int64(len(b)), CommitOptions{Adopt: true})
	if err != nil {
		t.Fatalf("commit after the duplicated file went: %v", err)
	}
	if !st.Adopted {
		t.Fatal("spool not adopted")
	}
	f, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, f.Size())
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("content differs (%v)", err)
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
