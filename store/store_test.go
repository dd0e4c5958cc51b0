package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

var ctx = context.Background()

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0xabcdef))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t testing.TB, s *store.Store, path string, b []byte) *store.PutStats {
	t.Helper()
	_, st, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), path, store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func get(t testing.TB, s *store.Store, path string) []byte {
	t.Helper()
	f, err := s.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPutGetPlain(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	for i, n := range []int{0, 1, 4095, 4096, 4097, 3*4096 + 1234, 100000} {
		b := randBytes(n, uint64(i))
		path := filepath.Join("dir", "sub", "f"+string(rune('a'+i)))
		st := put(t, s, path, b)
		if st.Kind != "plain" || st.NewBytes != int64(n) {
			t.Fatalf("%d bytes: stats %+v", n, st)
		}
		fi, err := s.Stat(path)
		if err != nil || fi.Size != int64(n) || fi.IsDir() || fi.Mode.Perm() != 0o644 {
			t.Fatalf("stat: %+v %v", fi, err)
		}
		f, err := s.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := iotest.TestReader(io.NewSectionReader(f, 0, f.Size()), b); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		f.Close()
	}
	ents, err := s.List("dir/sub")
	if err != nil || len(ents) != 7 {
		t.Fatalf("list: %d entries, %v", len(ents), err)
	}
	// The same content again stores nothing new.
	b := randBytes(100000, 6)
	if st := put(t, s, "copy", b); st.NewBytes != 0 || st.ReusedBytes != 100000 {
		t.Fatalf("duplicate put stored %+v", st)
	}
}

func TestReadAtContract(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	b := randBytes(50000, 1)
	put(t, s, "f", b)
	f, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, 100)
	if n, err := f.ReadAt(p, 49950); n != 50 || err != io.EOF || !bytes.Equal(p[:50], b[49950:]) {
		t.Fatalf("read across the end: n=%d err=%v", n, err)
	}
	if n, err := f.ReadAt(p, 60000); n != 0 || err != io.EOF {
		t.Fatalf("read past the end: n=%d err=%v", n, err)
	}
	if _, err := f.ReadAt(p, -1); err == nil {
		t.Fatal("negative offset accepted")
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 0))
			q := make([]byte, 7000)
			for i := 0; i < 200; i++ {
				off := r.IntN(len(b) - len(q))
				if n, err := f.ReadAt(q, int64(off)); n != len(q) || err != nil || !bytes.Equal(q, b[off:off+len(q)]) {
					t.Errorf("parallel ReadAt at %d: n=%d err=%v", off, n, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestNamespace(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	a, b := randBytes(9000, 1), randBytes(9000, 2)
	put(t, s, "x/a", a)
	put(t, s, "x/b", b)
	if err := s.Rename("x/a", "x/b"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "x/b"); !bytes.Equal(got, a) {
		t.Fatal("rename over did not replace")
	}
	if _, err := s.Stat("x/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old name still there: %v", err)
	}
	if err := s.Mkdir("y", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("x", "y/x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("y", "y/x/z"); err == nil {
		t.Fatal("moved a directory into itself")
	}
	if err := s.Remove("y"); err == nil {
		t.Fatal("removed a non-empty directory")
	}
	if err := s.Rename("y/x/b", "y"); err == nil {
		t.Fatal("renamed a file over a directory")
	}
	for _, bad := range []string{"../etc", "a/./b", "y/x/b/c"} {
		if _, err := s.Stat(bad); err == nil {
			t.Errorf("stat %q succeeded", bad)
		}
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(a), 9000, "y", store.PutOptions{}); err == nil {
		t.Fatal("put over a directory")
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(a), 9000, "y/x/b/c", store.PutOptions{}); err == nil {
		t.Fatal("put under a file")
	}
	if err := s.Remove("y/x/b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("y/x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("remove missing: %v", err)
	}
}

// TestRemoveWhileOpen: a reader keeps the bytes of a removed or replaced
// file until it closes; then the chunks are released.
func TestRemoveWhileOpen(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	a := randBytes(20000, 1)
	put(t, s, "f", a)
	f, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "f", randBytes(20000, 2)) // replace
	g, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(a))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("old handle lost its bytes: %v", err)
	}
	f.Close()
	g.Close()
	st, err := s.Stats()
	if err != nil || st.Chunks != 0 || st.Files != 0 {
		t.Fatalf("after the last close: %+v %v", st, err)
	}
}

// TestOrphanAfterCrash: a file removed while open and never closed (the
// process died) is released when the store opens again.
func TestOrphanAfterCrash(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	put(t, s, "f", randBytes(20000, 1))
	if _, err := s.Open("f"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("f"); err != nil {
		t.Fatal(err)
	}
	s = storetest.Reopen(t, s, store.Options{})
	if st, _ := s.Stats(); st.Chunks != 0 || st.StoredBytes != 0 {
		t.Fatalf("orphan not released: %+v", st)
	}
}

func TestBlobs(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	b := randBytes(10000, 3)
	sum := sha256hex(b)
	if st := put(t, s, "ns/blocks/"+sum, b); st.Kind != "blob" {
		t.Fatalf("kind %q", st.Kind)
	}
	wrong := "ns/blocks/" + sha256hex([]byte("other"))
	_, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), wrong, store.PutOptions{})
	if !errors.Is(err, store.ErrBlobMismatch) {
		t.Fatalf("mismatched blob: %v", err)
	}
	if _, err := s.Stat(wrong); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("mismatched blob was stored: %v", err)
	}
	// A tmp name is not checked (the engine renames it afterwards).
	put(t, s, "ns/blocks/"+sum+".tmp", b)
}

// TestBlobSizes: a blob's whole sha256 is checked at every size, whether
// it is one chunk (its name is then its chunk's ID, not hashed again), an
// empty file, a chunk of zeros, or many chunks; a wrong name is refused
// and a right one reads back.
func TestBlobSizes(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	for i, n := range []int{0, 1, C - 1, C, C + 1, 2 * C, 5*C + 17} {
		for _, zero := range []bool{false, true} {
			b := make([]byte, n)
			if !zero {
				b = randBytes(n, uint64(100+i))
			}
			sum := sha256hex(b)
			wrong := sha256hex(append([]byte{1}, b...))
			_, _, err := s.Put(ctx, bytes.NewReader(b), int64(n), "ns/blocks/"+wrong, store.PutOptions{})
			if !errors.Is(err, store.ErrBlobMismatch) {
				t.Fatalf("%d bytes (zeros %v) under a wrong name: %v", n, zero, err)
			}
			if st := put(t, s, "ns/blocks/"+sum, b); st.Kind != "blob" {
				t.Fatalf("%d bytes: kind %q", n, st.Kind)
			}
			f, err := s.Open("ns/blocks/" + sum)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if k, err := f.ReadAt(got, 0); k != n || !bytes.Equal(got, b) {
				t.Fatalf("%d bytes read back: %d, %v", n, k, err)
			}
			f.Close()
		}
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptChunk: with verification, a flipped byte in a pack is an error
// naming the file, the chunk and the offset; never wrong bytes.
func TestCorruptChunk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	// Chunks every 4096 bytes, where the test flips a byte.
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Dir: dir, Store: store.Options{FixedChunks: true}})
	b := randBytes(20000, 1)
	put(t, s, "f", b)
	s.Close()
	packs, _ := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs: %v", packs)
	}
	raw, _ := os.ReadFile(packs[0])
	raw[5000] ^= 0xff // inside the second chunk
	os.WriteFile(packs[0], raw, 0o600)

	v, err := store.Open(dir, store.Options{Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(b))
	_, err = f.ReadAt(got, 0)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("chunk corrupt")) ||
		!bytes.Contains([]byte(err.Error()), []byte("f at file offset 4096")) || !bytes.Contains([]byte(err.Error()), []byte(".pack offset 4096")) {
		t.Fatalf("corrupt read: %v", err)
	}
	// Unaffected chunks still read.
	if _, err := f.ReadAt(got[:4096], 0); err != nil || !bytes.Equal(got[:4096], b[:4096]) {
		t.Fatalf("clean chunk: %v", err)
	}
	if err := v.Check(ctx, store.CheckOptions{Verify: true}); err == nil {
		t.Fatal("check missed the corrupt chunk")
	}
	// Repair the pack so the cleanup check of the first handle passes.
	raw[5000] ^= 0xff
	os.WriteFile(packs[0], raw, 0o600)
}

func TestConcurrentPuts(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	shared := randBytes(64*1024, 99)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				b := append(bytes.Clone(shared[:4096*(1+(g+i)%8)]), randBytes(5000, uint64(g*100+i))...)
				name := filepath.Join("g", string(rune('a'+g)), string(rune('a'+i%3)))
				if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				if got := get(t, s, name); !bytes.Equal(got, b) {
					t.Errorf("%s reads back wrong", name)
				}
				if i%4 == 3 {
					s.Remove(name)
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestRecoveryCutsPackTail: bytes appended past a pack's committed length
// (a crash mid-ingest) are cut when the store opens.
func TestRecoveryCutsPackTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Dir: dir})
	b := randBytes(10000, 1)
	put(t, s, "f", b)
	s.Close()
	packs, _ := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	fh, _ := os.OpenFile(packs[0], os.O_APPEND|os.O_WRONLY, 0)
	fh.Write(randBytes(7777, 2))
	fh.Close()
	os.WriteFile(filepath.Join(dir, "spool", "leftover"), []byte("x"), 0o600)
	s2, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer storetest.MustCheck(t, s2)
	if got := get(t, s2, "f"); !bytes.Equal(got, b) {
		t.Fatal("file changed")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "spool")); len(ents) != 0 {
		t.Fatal("spool not emptied")
	}
	// New ingests append after the committed bytes.
	put(t, s2, "g", randBytes(10000, 3))
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := store.Open(dir, store.Options{}); err == nil {
		t.Fatal("opened a directory without a store")
	}
	if err := store.Init(dir, 100); err == nil {
		t.Fatal("accepted a 100-byte chunk size")
	}
	if err := store.Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	if err := store.Init(dir, 4096); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second init: %v", err)
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := store.Open(dir, store.Options{LockTimeout: 50e6}); err == nil {
		t.Fatal("a second opener got the store")
	}
}

func writeSnap(t testing.TB, m snapgen.Model, tokens []uint32) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.mlxkv")
	if err := m.WriteFile(p, tokens); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
