//go:build linux

package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// sparseSpool writes b to a new spool file, skipping every 4 KiB page of
// zeros (as cp does when the source has holes), so that the file has holes
// where b is zero.
func sparseSpool(t *testing.T, s *store.Store, b []byte) *os.File {
	t.Helper()
	f, err := os.CreateTemp(filepath.Join(s.Dir(), "spool"), "w-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	zero := make([]byte, 4096)
	for off := 0; off < len(b); off += 4096 {
		p := b[off:min(off+4096, len(b))]
		if bytes.Equal(p, zero[:len(p)]) {
			continue
		}
		if _, err := f.WriteAt(p, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSparseSpoolAdopted: a spool with holes inside chunks (a sparse file
// copied in) is adopted as a pack with its holes; the file reads back
// exactly and the checker accepts chunks whose holes hold the zeros their
// hash says.
func TestSparseSpoolAdopted(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 65536, Store: store.Options{AdoptMinBytes: 1}})
	b := randBytes(1<<20, 7)
	for _, r := range [][2]int{{4096, 20480}, {65536 + 8192, 65536 + 12288}, {300000 &^ 4095, 400000 &^ 4095}} {
		clear(b[r[0]:r[1]])
	}
	fi, err := s.CreateAt(manifest.RootIno, "sparse", 0o644, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	sp := sparseSpool(t, s, b)
	if _, st, err := s.CommitIno(ctx, fi.Ino, sp, int64(len(b)), store.CommitOptions{Mtime: time.Now(), Adopt: true}); err != nil || !st.Adopted {
		t.Fatalf("commit: %v (adopted: %v)", err, st != nil && st.Adopted)
	}
	if got := get(t, s, "sparse"); !bytes.Equal(got, b) {
		t.Fatal("sparse file reads back wrong")
	}
	for _, verify := range []bool{false, true} {
		if err := s.Check(ctx, store.CheckOptions{Verify: verify}); err != nil {
			t.Fatalf("check (verify %v) of a store holding a sparse adopted spool: %v", verify, err)
		}
	}
}

// TestCheckFindsPunchedLiveChunk: a hole punched into a live chunk's data
// is reported by the checker, with or without Verify.
func TestCheckFindsPunchedLiveChunk(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 65536})
	put(t, s, "f", randBytes(1<<20, 8))
	packs, err := filepath.Glob(filepath.Join(s.Dir(), "packs", "*"))
	if err != nil || len(packs) == 0 {
		t.Fatalf("no packs: %v", err)
	}
	f, err := os.OpenFile(packs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const punchHole, keepSize = 0x02, 0x01
	if err := syscall.Fallocate(int(f.Fd()), punchHole|keepSize, 8192, 4096); err != nil {
		t.Fatal(err)
	}
	for _, verify := range []bool{false, true} {
		err := s.Check(ctx, store.CheckOptions{Verify: verify})
		if err == nil || !strings.Contains(err.Error(), "1 problem") || !verify && !strings.Contains(err.Error(), "has a hole") {
			t.Fatalf("check (verify %v) of a punched live chunk: %v", verify, err)
		}
	}
	s.Close() // corrupt on purpose: no check at cleanup
}
