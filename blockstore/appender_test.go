package blockstore

import (
	"path/filepath"
	"slices"
	"sync"
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
				loc, ok := a.TryReserve(int64(1000+g*100+i%7), limit)
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
	if _, ok := a.TryReserve(limit-end+1, limit); ok {
		t.Fatal("reserved past the limit")
	}
	// An empty pack takes a chunk larger than the limit.
	b, _ := d.NewAppender(2, 0)
	defer b.Close()
	if loc, ok := b.TryReserve(2*limit, limit); !ok || loc.Off != 0 {
		t.Fatalf("an empty pack refused a chunk over the limit: %+v %v", loc, ok)
	}
}
