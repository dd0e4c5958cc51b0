//go:build linux

package fs

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// spoolFiles counts the spool files in dir.
func spoolFiles(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestMemSpoolSmallFile: a small file written through a spool in memory
// makes no spool file; its cells are hashed as they are written (from the
// buffer); a partial write over a committed cell keeps the cell's other
// committed bytes; a hole reads as zeros; and the commit (from the
// buffer: store.Changes.Mem) reads back as written.
func TestMemSpoolSmallFile(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	dir := filepath.Join(s.Dir(), "spool")
	mem := newMemBudget(64<<10, 1<<20)
	ctx := context.Background()
	old := bytes.Repeat([]byte{7}, 5*C+100)
	fi, _, err := s.Put(ctx, bytes.NewReader(old), int64(len(old)), "f", store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.OpenIno(fi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := newSpool(dir, base, C, false, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	if !sp.inMem() {
		t.Fatal("a spool over a small file is not in memory")
	}
	want := append([]byte(nil), old...)
	w := func(b []byte, off int64) {
		t.Helper()
		if n, err := sp.write(b, off); err != nil || n != len(b) {
			t.Fatalf("write %d at %d: %d, %v", len(b), off, n, err)
		}
		want = writeModel(want, b, off)
	}
	w([]byte("partial"), C+11)              // inside a committed cell
	w(bytes.Repeat([]byte{9}, 2*C), 2*C)    // two whole cells, hashed
	w([]byte("past the end"), 9*C+5)        // a hole from 5C+100 to 9C+5
	w(bytes.Repeat([]byte{3}, C-1), 10*C+1) // a cell short of its first byte
	if n := spoolFiles(t, dir); n != 0 {
		t.Fatalf("%d spool files for a spool in memory", n)
	}
	got := make([]byte, len(want))
	if n, err := sp.ReadAt(got, 0); n != len(want) || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("spool reads %d bytes (%v), or other bytes than written", n, err)
	}
	sp.hashing.Wait()
	for _, i := range []int64{2, 3} {
		if c := sp.cells[i]; !c.summed || c.sum != blockstore.Sum(want[i*C:i*C+C]) {
			t.Fatalf("cell %d written whole is not hashed from the buffer", i)
		}
	}
	nfi, _, err := s.CommitChanges(ctx, fi.Ino, sp.changes(), sp, store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.OpenIno(nfi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got = make([]byte, f.Size())
	f.ReadAt(got, 0)
	if !bytes.Equal(got, want) {
		t.Fatalf("the commit reads back %d bytes, not the %d written (or other bytes)", len(got), len(want))
	}
}

// TestMemSpoolSpill: a file that grows past the bound of a spool in
// memory moves to a spool file mid-file with every byte in place: writes
// at unaligned offsets before the spill (partial cells over a committed
// version, a truncation that cut a cell), the write that spills, and the
// ones after read back as written, and commit so.
func TestMemSpoolSpill(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	dir := filepath.Join(s.Dir(), "spool")
	mem := newMemBudget(16*C, 1<<20)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32()) | 1
		}
		return b
	}
	old := rnd(7*C + 333)
	fi, _, err := s.Put(ctx, bytes.NewReader(old), int64(len(old)), "f", store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.OpenIno(fi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := newSpool(dir, base, C, false, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	want := append([]byte(nil), old...)
	w := func(n int, off int64) {
		t.Helper()
		b := rnd(n)
		if k, err := sp.write(b, off); err != nil || k != n {
			t.Fatalf("write %d at %d: %d, %v", n, off, k, err)
		}
		want = writeModel(want, b, off)
	}
	w(1000, 3*C+17)
	if err := sp.truncate(6*C + 5); err != nil {
		t.Fatal(err)
	}
	want = want[:6*C+5]
	w(C+3, 6*C+900) // grows again: zeros between
	if !sp.inMem() || spoolFiles(t, dir) != 0 {
		t.Fatal("the spool left memory within its bound")
	}
	w(3*C+77, 14*C+2001) // past 16C: spills
	if sp.inMem() || spoolFiles(t, dir) != 1 {
		t.Fatal("a write past the bound did not spill the spool to a file")
	}
	if mem.used.Load() != 0 {
		t.Fatalf("a spilled spool still counts %d bytes of memory", mem.used.Load())
	}
	w(2*C, 5*C+1234)
	got := make([]byte, len(want))
	if n, err := sp.ReadAt(got, 0); n != len(want) || err != nil {
		t.Fatalf("read %d (%v)", n, err)
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("after the spill the spool reads %#x at %d, want %#x", got[i], i, want[i])
	}
	nfi, _, err := s.CommitChanges(ctx, fi.Ino, sp.changes(), sp, store.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.OpenIno(nfi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got = make([]byte, f.Size())
	f.ReadAt(got, 0)
	if len(got) != len(want) || firstDiff(got, want) >= 0 {
		t.Fatal("the commit after the spill does not read back as written")
	}
}

// TestMemSpoolSpillENOSPC: a spill that the disk cannot take (a full
// spool directory) fails the write with ENOSPC and nothing written; the
// spool stays in memory with every byte as before, and once there is room
// the same write spills and succeeds. A truncation past the bound fails
// the same way.
func TestMemSpoolSpillENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a small tmpfs for the spool")
	}
	const C = 4096
	dir := testutil.SmallFS(t, "tmpfs", 1<<20)
	mem := newMemBudget(8*C, 1<<20)
	sp, err := newSpool(dir, nil, C, false, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	data := bytes.Repeat([]byte{0x5A}, 6*C+99)
	if n, err := sp.write(data, 13); err != nil || n != len(data) {
		t.Fatalf("write: %d, %v", n, err)
	}
	want := writeModel(nil, data, 13)
	filler := filepath.Join(dir, "filler")
	testutil.Fill(t, filler)
	big := bytes.Repeat([]byte{0xC3}, 3*C)
	n, werr := sp.write(big, 7*C+1)
	if !errors.Is(werr, syscall.ENOSPC) || n != 0 {
		t.Fatalf("a write whose spill found the disk full: %d written, %v; want 0, ENOSPC", n, werr)
	}
	if err := sp.truncate(20 * C); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a truncation whose spill found the disk full: %v; want ENOSPC", err)
	}
	if !sp.inMem() || sp.size != int64(len(want)) {
		t.Fatalf("a failed spill changed the spool (in memory %v, size %d)", sp.inMem(), sp.size)
	}
	got := make([]byte, len(want))
	if _, err := sp.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after a failed spill the spool reads other bytes (%v)", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if n, err := sp.write(big, 7*C+1); err != nil || n != len(big) {
		t.Fatalf("the write with room: %d, %v", n, err)
	}
	want = writeModel(want, big, 7*C+1)
	if sp.inMem() {
		t.Fatal("the write past the bound did not spill")
	}
	got = make([]byte, len(want))
	if _, err := sp.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the spill the spool reads other bytes (%v)", err)
	}
}

// TestMemSpoolSparseGrow: a truncation that grows a spool in memory to
// its bound takes no memory for the zeros it adds (the hole reads as
// zeros, from the spool and from the commit), and one past the bound
// spills the spool.
func TestMemSpoolSparseGrow(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	ctx := context.Background()
	fi, _, err := s.Put(ctx, bytes.NewReader(nil), 0, "f", store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mem := newMemBudget(64*C, 1<<20)
	sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	if _, err := sp.write([]byte("head"), 5); err != nil {
		t.Fatal(err)
	}
	if err := sp.truncate(64 * C); err != nil {
		t.Fatal(err)
	}
	if !sp.inMem() || len(sp.mem) > C || mem.used.Load() > memSpoolMin {
		t.Fatalf("a sparse grow to the bound: in memory %v, %d bytes held, %d counted", sp.inMem(), len(sp.mem), mem.used.Load())
	}
	want := make([]byte, 64*C)
	copy(want[5:], "head")
	got := make([]byte, len(want))
	if n, err := sp.ReadAt(got, 0); n != len(want) || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the spool reads %d bytes (%v), or other bytes than written", n, err)
	}
	nfi, _, err := s.CommitChanges(ctx, fi.Ino, sp.changes(), sp, store.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.OpenIno(nfi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got = make([]byte, f.Size())
	f.ReadAt(got, 0)
	if !bytes.Equal(got, want) {
		t.Fatal("the commit of a sparse spool in memory does not read back as written")
	}
	if err := sp.truncate(64*C + 1); err != nil {
		t.Fatal(err)
	}
	if sp.inMem() {
		t.Fatal("a truncation past the bound did not spill")
	}
}

// TestMemSpoolReusesBuffers: a closed spool's buffer goes to the next
// spool, after a spill too, and never carries the old file's bytes: every
// byte that the new file did not write reads as zero, at any offset, past
// a truncation and after a growth.
func TestMemSpoolReusesBuffers(t *testing.T) {
	const C = 4096
	dir := t.TempDir()
	mem := newMemBudget(256<<10, 1<<20)
	ones := bytes.Repeat([]byte{0xff}, 256<<10)
	dirty := func() *spool {
		sp, err := newSpool(dir, nil, C, false, mem)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.write(ones, 0); err != nil || !sp.inMem() {
			t.Fatalf("write 256 KiB into a spool in memory: %v (in memory %v)", err, sp.inMem())
		}
		return sp
	}
	for round, end := range []func(*spool){
		func(sp *spool) { sp.close(true) },
		func(sp *spool) {
			if err := sp.truncate(100); err != nil { // clears the rest first
				t.Fatal(err)
			}
			sp.close(true)
		},
		func(sp *spool) {
			if err := sp.spill(); err != nil {
				t.Fatal(err)
			}
			sp.close(true)
		},
	} {
		end(dirty())
		if mem.used.Load() != 0 || mem.bufs.Held() == 0 {
			t.Fatalf("round %d: %d bytes counted, %d kept for reuse after the close", round, mem.used.Load(), mem.bufs.Held())
		}
		sp, err := newSpool(dir, nil, C, false, mem)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 256<<10)
		for _, w := range []struct {
			off int64
			b   string
		}{{250000, "v"}, {77, "x"}, {70000, "yz"}, {3 * C, "w"}} {
			if _, err := sp.write([]byte(w.b), w.off); err != nil {
				t.Fatal(err)
			}
			copy(want[w.off:], w.b)
		}
		if err := sp.truncate(int64(len(want))); err != nil {
			t.Fatal(err)
		}
		if !sp.inMem() {
			t.Fatalf("round %d: the new spool is not in memory", round)
		}
		got := make([]byte, len(want))
		if n, err := sp.ReadAt(got, 0); n != len(got) || err != nil {
			t.Fatalf("round %d: read %d bytes: %v", round, n, err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("round %d: byte %d of a spool on a reused buffer is %#x, want %#x", round, i, got[i], want[i])
		}
		sp.close(true)
	}
}
