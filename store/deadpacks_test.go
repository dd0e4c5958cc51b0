package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

func packFiles(t *testing.T, dir string) []string {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	if err != nil {
		t.Fatal(err)
	}
	return packs
}

// TestDeadPacksRemoved: a pack left with nothing live goes, file and
// record, however its chunks died (a file replaced, removed, or renamed
// over); one with a live chunk stays. Before, packs were never removed, so
// each version of a file that had been read kept a descriptor for good.
func TestDeadPacksRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	// One-byte packs: every ingest fills its pack, which is released at
	// once, so each version (one chunk) has a pack of its own.
	s := storetest.New(t, storetest.Options{Dir: dir, Store: store.Options{PackBytes: 1}})
	for i := uint64(0); i < 20; i++ {
		put(t, s, "f", randBytes(10000, i))
		get(t, s, "f") // opens the pack's read descriptor
	}
	if n := len(packFiles(t, dir)); n != 1 {
		t.Fatalf("%d packs after rewriting one file 20 times, want 1", n)
	}
	put(t, s, "g", randBytes(10000, 100))
	if err := s.Rename("g", "f"); err != nil {
		t.Fatal(err)
	}
	if n := len(packFiles(t, dir)); n != 1 {
		t.Fatalf("%d packs after a rename over, want 1", n)
	}
	// A pack shared by two files stays while either lives.
	b := randBytes(10000, 200)
	put(t, s, "a", b)
	put(t, s, "b", b)
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "b"); !bytes.Equal(got, b) {
		t.Fatal("b changed")
	}
	if err := s.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if n := len(packFiles(t, dir)); n != 0 {
		t.Fatalf("%d packs with no file left, want 0", n)
	}
}

// TestDeadPackKeptWhileOpen: a file open for reading keeps its pack after
// its name goes, until it is closed.
func TestDeadPackKeptWhileOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, Store: store.Options{PackBytes: 1}})
	b := randBytes(10000, 1)
	put(t, s, "f", b)
	f, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("f"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(b))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read after remove: %v", err)
	}
	if n := len(packFiles(t, dir)); n != 1 {
		t.Fatalf("%d packs while the file is open, want 1", n)
	}
	f.Close()
	if n := len(packFiles(t, dir)); n != 0 {
		t.Fatalf("%d packs after the last close, want 0", n)
	}
}

// TestDeadPacksConcurrent: concurrent rewrites of shared content with packs
// dying under them: every file reads back and the store checks.
func TestDeadPacksConcurrent(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{PackBytes: 8192}})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a' + w))
			for i := uint64(0); i < 30; i++ {
				// Shared with the other writers half the time.
				b := randBytes(12000, i%5+uint64(w%2)*100)
				if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				f, err := s.Open(name)
				if err != nil {
					t.Error(err)
					return
				}
				got := make([]byte, f.Size())
				_, err = f.ReadAt(got, 0)
				f.Close()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestRecoveryRemovesDroppedPack: a pack file whose record is gone (the
// daemon stopped between the two) is removed when the store opens.
func TestRecoveryRemovesDroppedPack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Dir: dir})
	b := randBytes(10000, 1)
	put(t, s, "f", b)
	s.Close()
	stray := filepath.Join(dir, "packs", "999999.pack")
	if err := os.WriteFile(stray, randBytes(5000, 2), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer storetest.MustCheck(t, s2)
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Fatalf("pack without a record still there: %v", err)
	}
	if got := get(t, s2, "f"); !bytes.Equal(got, b) {
		t.Fatal("file changed")
	}
}
