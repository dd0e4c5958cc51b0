//go:build linux

package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestBlobHashedWhileWritten: engine blocks written through the mount as
// the engine writes them (blocks/<h>.tmp, written in order in pieces of
// any size, fsync, close, rename to blocks/<h>) are hashed whole while
// written: their commits read and hash only each block's last, short
// chunk (the daemon's metrics), four writers at once. Each block is the
// blob its name says: its bytes read back from another process hash to
// its name, and another namespace's blocks directory finds it. A block
// changed after its cells were hashed takes the new content's sha256: it
// cannot be renamed to the sha256 of what was first written. After a
// remount every block reads back the same, and the store checks clean.
func TestBlobHashedWhileWritten(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	const C = 64 << 10
	ns, other := m.path("fp/base/blocks"), m.path("fp/other/blocks")
	for _, d := range []string{ns, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sizes := []int{0, 1, C - 1, C, C + 1, 1 << 20, 1<<20 + 777, 3<<20 + 5}
	type block struct {
		h    string
		data []byte
	}
	var (
		mu     sync.Mutex
		blocks []block
		tails  int64 // bytes of the blocks' last, short chunks
	)
	before := scrape(t, addr)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for k, size := range sizes {
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(r.Uint32()) | 1
				}
				data = append(data[:0:0], data...)
				data = append(data, byte(w), byte(k)) // distinct per writer
				sum := sha256.Sum256(data)
				h := hex.EncodeToString(sum[:])
				if err := writeBlock(filepath.Join(ns, h), data, r); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				blocks = append(blocks, block{h, data})
				tails += int64(len(data) % C)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := scrape(t, addr)
	hashed := counter(after, "kvfs_commit_hashed_bytes_total") - counter(before, "kvfs_commit_hashed_bytes_total")
	var total int64
	for _, b := range blocks {
		total += int64(len(b.data))
	}
	t.Logf("%d blocks, %d bytes: their commits hashed %g bytes (last chunks: %d)", len(blocks), total, hashed, tails)
	if !strings.Contains(os.Getenv("KVFS_TEST_MOUNT_ARGS"), "writeback") && hashed != float64(tails) {
		// With the kernel's writeback cache, writes may come out of order.
		t.Errorf("the commits hashed %g bytes, want only the blocks' last, short chunks (%d bytes)", hashed, tails)
	}

	// A block changed after its cells were hashed.
	r := rand.New(rand.NewPCG(9, 9))
	first := make([]byte, 2<<20+100)
	for i := range first {
		first[i] = byte(r.Uint32()) | 1
	}
	final := append([]byte{}, first...)
	copy(final[C+500:], "changed after its cells were hashed")
	stale := sha256.Sum256(first)
	tmp := filepath.Join(ns, "changed.tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(first); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(final[C+500:C+600], C+500); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = os.Rename(tmp, filepath.Join(ns, hex.EncodeToString(stale[:])))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("rename of a changed block to the sha256 of its first content: %v, want EIO", err)
	}
	sum := sha256.Sum256(final)
	if err := os.Rename(tmp, filepath.Join(ns, hex.EncodeToString(sum[:]))); err != nil {
		t.Fatalf("rename of a changed block to its content's sha256: %v", err)
	}
	blocks = append(blocks, block{hex.EncodeToString(sum[:]), final})

	check := func(when string) {
		t.Helper()
		var script strings.Builder
		for _, b := range blocks {
			fmt.Fprintf(&script, "test \"$(sha256sum < %s/%s | cut -c1-64)\" = %s || echo bad %s\n", ns, b.h, b.h, b.h)
		}
		if out := sh(t, script.String()); out != "" {
			t.Fatalf("%s: blocks whose bytes do not hash to their names:\n%s", when, out)
		}
		for _, b := range blocks {
			for _, dir := range []string{ns, other} {
				got, err := os.ReadFile(filepath.Join(dir, b.h))
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if !bytes.Equal(got, b.data) {
					t.Fatalf("%s: %s/%s: %d bytes differ from the %d written", when, dir, b.h, len(got), len(b.data))
				}
			}
		}
	}
	check("mounted")
	remount(t, m, "--metrics", freeAddr(t))
	check("after a remount")
}

// writeBlock writes data as the engine writes a block: p.tmp, written in
// order in pieces of random sizes, fsynced, closed, renamed to p.
func writeBlock(p string, data []byte, r *rand.Rand) error {
	f, err := os.OpenFile(p+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+r.IntN(300_000))
		if _, err := f.Write(data[off : off+n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s at %d: %w", p, off, err)
		}
		off += n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}
