package pool_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/pool"
)

// TestCache: chunks survive a reopen; a chunk file damaged while the
// cache was closed is a miss on its first read (and is removed), never
// wrong bytes; a torn temporary file is cleared at open, a file that is
// not the cache's is left alone; the bound evicts
// the least recently used chunks.
func TestCache(t *testing.T) {
	dir := t.TempDir()
	c, err := pool.OpenCache(dir, 3*1000)
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
	c, err = pool.OpenCache(dir, 3*1000)
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
	if st := c.Stats(); st.Chunks != 2 || st.Bytes != 2000 || st.Misses != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
