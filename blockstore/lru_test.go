package blockstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// newPacks creates n packs, pack i holding one chunk: "pack i" padded to
// 100 bytes.
func newPacks(t *testing.T, opts Options, n int) (*Dir, []Loc) {
	t.Helper()
	d, err := OpenWith(filepath.Join(t.TempDir(), "packs"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	locs := make([]Loc, n)
	for i := range locs {
		a, err := d.NewAppender(uint32(i+1), 0)
		if err != nil {
			t.Fatal(err)
		}
		if locs[i], err = a.Append(packContent(i)); err != nil {
			t.Fatal(err)
		}
		a.Close()
	}
	return d, locs
}

func packContent(i int) []byte {
	b := make([]byte, 100)
	copy(b, fmt.Sprintf("pack %d", i))
	return b
}

// fdCount counts this process's open descriptors.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestLRUCap: reading many more packs than the cap keeps at most the cap
// open, both by the Dir's count and by the process's descriptors, and a
// pack whose descriptor was closed reads again.
func TestLRUCap(t *testing.T) {
	const max = 8
	d, locs := newPacks(t, Options{MaxOpen: max}, 100)
	before := fdCount(t)
	for round := 0; round < 3; round++ {
		for i, loc := range locs {
			got := make([]byte, loc.Len)
			if _, err := d.ReadAt(got, loc, 0); err != nil || !bytes.Equal(got, packContent(i)) {
				t.Fatalf("round %d pack %d: %q %v", round, i, got, err)
			}
			if n := d.OpenFiles(); n > max {
				t.Fatalf("%d descriptors open, cap %d", n, max)
			}
		}
	}
	if n := d.OpenFiles(); n != max {
		t.Fatalf("%d descriptors open after reading 100 packs, want the cap %d", n, max)
	}
	if got := fdCount(t) - before; got > max {
		t.Fatalf("the process has %d more descriptors, cap %d", got, max)
	}
	d.Close()
	if n := d.OpenFiles(); n != 0 {
		t.Fatalf("%d descriptors open after Close", n)
	}
	if _, err := d.Acquire(1); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

// TestLRUOrder: the least recently used idle descriptor is the one closed.
func TestLRUOrder(t *testing.T) {
	d, _ := newPacks(t, Options{MaxOpen: 2}, 3)
	use := func(pack uint32) {
		pf, err := d.Acquire(pack)
		if err != nil {
			t.Fatal(err)
		}
		pf.Release()
	}
	use(1)
	use(2)
	use(1) // 2 is now the least recently used
	use(3)
	d.mu.Lock()
	_, has1 := d.files[1]
	_, has2 := d.files[2]
	d.mu.Unlock()
	if !has1 || has2 {
		t.Fatalf("after 1,2,1,3 with cap 2: pack 1 open %v, pack 2 open %v; want 1 kept, 2 closed", has1, has2)
	}
}

// TestLRUBusyNeverClosed: descriptors in use stay open (and keep reading
// their own pack) however far the cap is exceeded; once released, the
// count falls back to the cap.
func TestLRUBusyNeverClosed(t *testing.T) {
	const max = 4
	d, locs := newPacks(t, Options{MaxOpen: max}, 20)
	var held []*PackFile
	for i := range locs {
		pf, err := d.Acquire(uint32(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, pf)
	}
	if n := d.OpenFiles(); n != len(locs) {
		t.Fatalf("%d open while %d are held", n, len(locs))
	}
	// Churn through other reads: nothing held may be closed.
	for i := range locs {
		if _, err := d.ReadAt(make([]byte, 10), locs[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	for i, pf := range held {
		got := make([]byte, 100)
		if _, err := pf.File().ReadAt(got, 0); err != nil || !bytes.Equal(got, packContent(i)) {
			t.Fatalf("held descriptor of pack %d: %q %v", i+1, got, err)
		}
	}
	// A second reference to a held pack shares its descriptor.
	again, err := d.Acquire(1)
	if err != nil || again != held[0] {
		t.Fatalf("second Acquire of pack 1: %p %v, want the held %p", again, err, held[0])
	}
	again.Release()
	for _, pf := range held {
		pf.Release()
	}
	if n := d.OpenFiles(); n != max {
		t.Fatalf("%d open after every release, want the cap %d", n, max)
	}
}

// TestLRURemovedPack: a pack removed while a reader holds its descriptor
// stays readable through it and is closed at the last release; a removed
// pack cannot be acquired again.
func TestLRURemovedPack(t *testing.T) {
	d, locs := newPacks(t, Options{MaxOpen: 4}, 3)
	pf, err := d.Acquire(2)
	if err != nil {
		t.Fatal(err)
	}
	before := d.OpenFiles()
	if err := d.Remove(2); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 100)
	if _, err := pf.File().ReadAt(got, 0); err != nil || !bytes.Equal(got, packContent(1)) {
		t.Fatalf("held descriptor of a removed pack: %q %v", got, err)
	}
	if n := d.OpenFiles(); n != before {
		t.Fatalf("%d open after Remove while held, want %d", n, before)
	}
	if _, err := d.ReadAt(got, locs[1], 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of a removed pack: %v", err)
	}
	pf.Release()
	if n := d.OpenFiles(); n != before-1 {
		t.Fatalf("%d open after the last release of a removed pack, want %d", n, before-1)
	}
	// Removing an idle pack closes its descriptor at once.
	if _, err := d.ReadAt(got, locs[0], 0); err != nil {
		t.Fatal(err)
	}
	n := d.OpenFiles()
	if err := d.Remove(1); err != nil {
		t.Fatal(err)
	}
	if d.OpenFiles() != n-1 {
		t.Fatalf("idle descriptor of a removed pack left open")
	}
}

// TestLRUConcurrent: readers on many goroutines over more packs than the
// cap (run with -race) read the right bytes, and every descriptor they
// hold is their pack's while they hold it.
func TestLRUConcurrent(t *testing.T) {
	const max, packs, workers = 5, 40, 16
	d, locs := newPacks(t, Options{MaxOpen: max}, packs)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 100)
			for k := 0; k < 400; k++ {
				i := (w*7 + k*13) % packs
				if k%2 == 0 {
					if _, err := d.ReadAt(buf, locs[i], 0); err != nil || !bytes.Equal(buf, packContent(i)) {
						errs <- fmt.Errorf("worker %d pack %d: %q %v", w, i, buf, err)
						return
					}
					continue
				}
				pf, err := d.Acquire(uint32(i + 1))
				if err != nil {
					errs <- err
					return
				}
				// The descriptor is this pack's for as long as it is held.
				link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(pf.File().Fd())))
				_, rerr := pf.File().ReadAt(buf, 0)
				pf.Release()
				if link != d.Path(uint32(i+1)) || rerr != nil || !bytes.Equal(buf, packContent(i)) {
					errs <- fmt.Errorf("worker %d held pack %d: descriptor is %q, read %q %v", w, i+1, link, buf, rerr)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.OpenFiles(); n > max {
		t.Fatalf("%d open when no one reads, cap %d", n, max)
	}
}

// TestLRURemoveWhileOpening: a descriptor opened while its pack is being
// removed is not kept, so a later pack at the same path (were a number
// ever reused) is read, not the removed file.
func TestLRURemoveWhileOpening(t *testing.T) {
	d, _ := newPacks(t, Options{MaxOpen: 4}, 0)
	for i := 0; i < 200; i++ {
		old := []byte(fmt.Sprint("old ", i))
		if err := os.WriteFile(d.Path(7), old, 0o600); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if pf, err := d.Acquire(7); err == nil {
					pf.Release()
				}
			}()
		}
		if err := d.Remove(7); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		cur := []byte(fmt.Sprint("new ", i))
		if err := os.WriteFile(d.Path(7), cur, 0o600); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(cur))
		if _, err := d.ReadAt(got, Loc{Pack: 7, Len: int64(len(cur))}, 0); err != nil || !bytes.Equal(got, cur) {
			t.Fatalf("round %d: read %q %v, want %q: a descriptor of the removed file was kept", i, got, err, cur)
		}
		if err := d.Remove(7); err != nil {
			t.Fatal(err)
		}
	}
}
