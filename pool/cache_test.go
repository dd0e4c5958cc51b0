package pool_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// TestCache: chunks survive a reopen; a chunk file damaged while the
// cache was closed is a miss on its first read (and is removed), never
// wrong bytes; a torn temporary file is cleared at open, a file that is
// not the cache's is left alone; the bound evicts
// the least recently used chunks, counting each chunk file as the whole
// 4 KiB blocks it takes on disk (three chunks of 1000 bytes fill 12 KiB).
func TestCache(t *testing.T) {
	dir := t.TempDir()
	c, err := pool.OpenCache(dir, 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	chunks := make([][]byte, 4)
	sums := make([][32]byte, 4)
	for i := range chunks {
		chunks[i] = randBytes(1000, uint64(i))
		sums[i] = sha256.Sum256(chunks[i])
	}
	for i := range 3 {
		if err := c.Add(sums[i], chunks[i]); err != nil {
			t.Fatal(err)
		}
	}
	c.Get(sums[0]) // 1 is now the least recently used
	if err := c.Add(sums[3], chunks[3]); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(sums[1]); ok || c.Stats().Evicted != 1 {
		t.Fatalf("the least recently used chunk was kept past the bound: %+v", c.Stats())
	}
	for _, i := range []int{0, 2, 3} {
		if b, ok := c.Get(sums[i]); !ok || !bytes.Equal(b, chunks[i]) {
			t.Fatalf("chunk %d: %v", i, ok)
		}
	}
	// Damage chunk 2's file, leave a torn temporary file, reopen.
	p2 := filepath.Join(dir, hex.EncodeToString(sums[2][:]))
	bad := bytes.Clone(chunks[2])
	bad[500] ^= 0xff
	os.WriteFile(p2, bad, 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("torn"), 0o600)
	// A file that is not the cache's (the directory may be shared) is
	// left alone.
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600)
	c, err = pool.OpenCache(dir, 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !os.IsNotExist(err) {
		t.Fatal("a torn temporary file survived the open")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("a file that is not the cache's was touched: %q, %v", b, err)
	}
	if b, ok := c.Get(sums[2]); ok {
		t.Fatalf("a damaged chunk file was returned (%d bytes)", len(b))
	}
	if _, err := os.Stat(p2); !os.IsNotExist(err) {
		t.Fatal("a damaged chunk file was kept")
	}
	for _, i := range []int{0, 3} {
		if b, ok := c.Get(sums[i]); !ok || !bytes.Equal(b, chunks[i]) {
			t.Fatalf("chunk %d after a reopen: %v", i, ok)
		}
	}
	if st := c.Stats(); st.Chunks != 2 || st.Bytes != 2*4096 || st.Misses != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestCacheAddLater: a chunk added in the background is served (and
// counted) at once, from memory, and is soon on disk, where a reopen
// finds it; a chunk the writer cannot write (its directory gone) is
// counted as failed, with the reason, and is a later miss; Close returns
// with chunks still waiting (they are not cached), and after it nothing
// is added.
func TestCacheAddLater(t *testing.T) {
	dir := t.TempDir()
	c, err := pool.OpenCache(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var sums [][32]byte
	for i := range 50 {
		b := randBytes(1000+i, uint64(i))
		sum := sha256.Sum256(b)
		sums = append(sums, sum)
		c.AddLater(sum, b)
		if got, ok := c.Get(sum); !ok || !bytes.Equal(got, b) || !c.Has(sum) {
			t.Fatalf("chunk %d just added later: %v", i, ok)
		}
	}
	if st := c.Stats(); st.Chunks != 50 {
		t.Fatalf("stats while writing: %+v", st)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, _ := os.ReadDir(dir)
		if len(n) == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 50 chunks written in 10 s", len(n))
		}
	}
	c.Close()
	late := randBytes(100, 99)
	c.AddLater(sha256.Sum256(late), late)
	if c.Has(sha256.Sum256(late)) {
		t.Fatal("AddLater after Close added a chunk")
	}
	for _, sum := range sums {
		if _, err := os.Stat(filepath.Join(dir, hex.EncodeToString(sum[:]))); err != nil {
			t.Fatalf("a chunk added later is not on disk after Close: %v", err)
		}
	}
	c2, err := pool.OpenCache(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Chunks != 50 {
		t.Fatalf("reopened: %+v", st)
	}
	c2.Close()

	gone := filepath.Join(t.TempDir(), "cache")
	c3, err := pool.OpenCache(gone, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(gone)
	b := randBytes(500, 7)
	c3.AddLater(sha256.Sum256(b), b)
	for deadline := time.Now().Add(10 * time.Second); c3.Stats().Failed == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	c3.Close()
	if st := c3.Stats(); st.Failed != 1 || st.LastError == "" || st.Chunks != 0 {
		t.Fatalf("a chunk that could not be written: %+v", st)
	}
	// Close with many chunks waiting returns without writing them all.
	dir4 := t.TempDir()
	c4, err := pool.OpenCache(dir4, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		b := randBytes(4000, uint64(1000+i))
		c4.AddLater(sha256.Sum256(b), b)
	}
	c4.Close()
	n, _ := os.ReadDir(dir4)
	t.Logf("Close with 2000 chunks waiting: %d written", len(n))
	if _, ok := c3.Get(sha256.Sum256(b)); ok {
		t.Fatal("a chunk that could not be written is served")
	}
}
