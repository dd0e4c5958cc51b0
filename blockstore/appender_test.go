package blockstore

import (
	"bytes"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// TestTryReserveConcurrent: ingests sharing a pack reserve from many
// goroutines at once: the ranges tile the pack from its committed length
// without overlap, none ends past the limit (but the first, in an empty
// pack), and the pack's size is their end.
func TestTryReserveConcurrent(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "packs"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := d.NewAppender(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const limit = 1 << 20
	var mu sync.Mutex
	var got []Loc
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				loc, ok := a.TryReserve(int64(4096*(1+i%3)), limit, -1)
				if !ok {
					return
				}
				mu.Lock()
				got = append(got, loc)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(got, func(x, y Loc) int { return int(x.Off - y.Off) })
	var end int64
	for _, l := range got {
		if l.Off != end || l.Pack != 1 {
			t.Fatalf("range %+v after %d: ranges must tile the pack", l, end)
		}
		end = l.End()
	}
	if end > limit || a.Size() != end {
		t.Fatalf("reserved up to %d, size %d, limit %d", end, a.Size(), limit)
	}
	if _, ok := a.TryReserve(limit-end+1, limit, end); ok {
		t.Fatal("reserved past the limit")
	}
	// An empty pack takes a chunk larger than the limit.
	b, _ := d.NewAppender(2, 0)
	defer b.Close()
	if loc, ok := b.TryReserve(2*limit, limit, -1); !ok || loc.Off != 0 {
		t.Fatalf("an empty pack refused a chunk over the limit: %+v %v", loc, ok)
	}
	// A range that does not follow the caller's last one starts on a
	// page; one that does follows it.
	c, _ := d.NewAppender(3, 0)
	defer c.Close()
	x, _ := c.TryReserve(5000, limit, -1)
	y, _ := c.TryReserve(100, limit, x.End())
	z, _ := c.TryReserve(100, limit, -1)
	if x.Off != 0 || y.Off != 5000 || z.Off != 2*PageSize || c.Size() != z.End() {
		t.Fatalf("ranges %+v %+v %+v, size %d", x, y, z, c.Size())
	}
}

// TestPunchMergesAdjacent: dead chunks that touch, at offsets that are not
// page multiples, are punched as one range, so the pages they fill whole
// are freed (one punch per chunk frees none of them), and the bytes just
// outside stay.
func TestPunchMergesAdjacent(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "packs"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, _ := d.NewAppender(1, 0)
	defer a.Close()
	head, _ := a.Append(bytes.Repeat([]byte("h"), 1000))
	var dead []Loc
	for i := 0; i < 16; i++ {
		l, _ := a.Append(bytes.Repeat([]byte{byte(i)}, PageSize))
		dead = append(dead, l)
	}
	tail, _ := a.Append(bytes.Repeat([]byte("t"), 1000))
	a.Sync()
	before := diskBytes(t, d.Path(1))
	if err := d.Punch(1, dead); err != nil {
		t.Fatal(err)
	}
	if freed := before - diskBytes(t, d.Path(1)); freed < 15*PageSize {
		t.Fatalf("punching 16 adjacent unaligned pages' worth of chunks freed %d bytes, want at least 15 pages", freed)
	}
	for _, l := range []Loc{head, tail} {
		got := make([]byte, l.Len)
		if _, err := d.ReadAt(got, l, 0); err != nil || bytes.Count(got, got[:1]) != int(l.Len) || got[0] == 0 {
			t.Fatalf("live bytes beside the punched ones changed: %q %v", got[:8], err)
		}
	}
}

// diskBytes is the disk space a file takes.
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
