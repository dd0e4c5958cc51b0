package store_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// packsDisk is the allocated bytes of a store's pack files.
func packsDisk(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, p := range packFiles(t, dir) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// fillAndThin puts n files of size bytes each (unique content) and removes
// all but every keep-th; it returns the survivors' contents.
func fillAndThin(t testing.TB, s *store.Store, n, size, keep int) map[string][]byte {
	t.Helper()
	live := map[string][]byte{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("f%03d", i)
		b := randBytes(size, uint64(i)+1)
		put(t, s, name, b)
		live[name] = b
	}
	for i := 0; i < n; i++ {
		if i%keep == 0 {
			continue
		}
		name := fmt.Sprintf("f%03d", i)
		if err := s.Remove(name); err != nil {
			t.Fatal(err)
		}
		delete(live, name)
	}
	s.WaitReclaim()
	return live
}

// TestCompactMovesLiveChunks: packs three quarters dead are rewritten: the
// live chunks move to new packs, every surviving file reads back the same
// (one opened and half read before the compaction too), the pack count and the disk
// space drop, and Check (at cleanup, with verification) is clean. Before
// Compact existed, the packs stayed as they were.
func TestCompactMovesLiveChunks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, ChunkSize: 16 << 10, Store: store.Options{PackBytes: 512 << 10}})
	live := fillAndThin(t, s, 64, 50_000, 4)
	early, err := s.Open("f000")
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	// Its first half read before the compaction, the rest after: the
	// chunks it found before have moved (read again from where they lie
	// now), the others are looked up only after the move.
	half := make([]byte, early.Size()/2)
	if _, err := early.ReadAt(half, 0); err != nil || !bytes.Equal(half, live["f000"][:len(half)]) {
		t.Fatalf("read the first half of a file before compaction: %v", err)
	}
	packsBefore, diskBefore := len(packFiles(t, dir)), packsDisk(t, dir)

	res, err := s.Compact(context.Background(), store.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *res)
	packsAfter, diskAfter := len(packFiles(t, dir)), packsDisk(t, dir)
	if res.PacksRewritten == 0 || res.PacksDeleted < res.PacksRewritten || res.ChunksMoved == 0 || res.BytesCopied == 0 {
		t.Fatalf("compaction did nothing: %+v", *res)
	}
	if packsAfter >= packsBefore {
		t.Fatalf("%d packs after compaction, %d before", packsAfter, packsBefore)
	}
	if diskAfter > diskBefore || res.DiskAfter > res.DiskBefore {
		t.Fatalf("disk usage %d after compaction, %d before (result %+v)", diskAfter, diskBefore, *res)
	}
	for name, b := range live {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s changed by compaction", name)
		}
	}
	got := make([]byte, early.Size())
	if _, err := early.ReadAt(got, 0); err != nil {
		t.Fatalf("read a file opened before compaction: %v", err)
	}
	if !bytes.Equal(got, live["f000"]) {
		t.Fatal("a file opened before compaction reads other bytes")
	}
	// Nothing qualifies any more.
	again, err := s.Compact(context.Background(), store.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.PacksRewritten != 0 || again.PacksDeleted != 0 {
		t.Fatalf("a second compaction found work: %+v", *again)
	}
	s = storetest.Reopen(t, s, store.Options{})
	for name, b := range live {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s changed after compaction and reopen", name)
		}
	}
}

// TestCompactDryRun: a dry run reports the work and changes nothing: the
// same pack files, of the same sizes.
func TestCompactDryRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, ChunkSize: 16 << 10, Store: store.Options{PackBytes: 512 << 10}})
	live := fillAndThin(t, s, 40, 50_000, 4)
	sizes := func() map[string]int64 {
		out := map[string]int64{}
		for _, p := range packFiles(t, dir) {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = fi.Size()
		}
		return out
	}
	before := sizes()
	res, err := s.Compact(context.Background(), store.CompactOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.PacksRewritten == 0 || res.BytesCopied == 0 || res.PacksDeleted == 0 {
		t.Fatalf("dry run reports no work: %+v", *res)
	}
	after := sizes()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("dry run changed the packs: %v, then %v", before, after)
	}
	for name, b := range live {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s changed", name)
		}
	}
	// A threshold above every pack's dead fraction finds nothing.
	res, err = s.Compact(context.Background(), store.CompactOptions{DryRun: true, Threshold: 0.99})
	if err != nil {
		t.Fatal(err)
	}
	if res.PacksRewritten != 0 {
		t.Fatalf("threshold 0.99: %+v", *res)
	}
}

// TestCompactConcurrent (run under -race): readers verify the bytes of
// many files at unaligned offsets, through handles opened before and
// during compaction, while Compact runs again and again and writers and
// removers change the store. No read may fail or differ, and Check is
// clean at the end.
func TestCompactConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, ChunkSize: 8 << 10, Store: store.Options{PackBytes: 256 << 10}})
	// Stable files that the readers check, interleaved with files that
	// are removed so that their packs become mostly dead.
	stable := map[string][]byte{}
	for i := 0; i < 24; i++ {
		b := randBytes(30_000+i*1000, uint64(i)+1000)
		name := fmt.Sprintf("keep%02d", i)
		put(t, s, name, b)
		stable[name] = b
		for k := 0; k < 3; k++ {
			put(t, s, fmt.Sprintf("tmp%02d-%d", i, k), randBytes(30_000, uint64(i*10+k)+5000))
		}
	}
	names := make([]string, 0, len(stable))
	for n := range stable {
		names = append(names, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var compactions, reads atomic.Int64
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	// Readers: each holds a handle for a while, reading at random offsets.
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for ctx.Err() == nil {
				name := names[rng.IntN(len(names))]
				want := stable[name]
				f, err := s.Open(name)
				if err != nil {
					fail("open %s: %v", name, err)
					return
				}
				for k := 0; k < 20 && ctx.Err() == nil; k++ {
					off := rng.IntN(len(want))
					n := min(len(want)-off, 1+rng.IntN(20_000))
					buf := make([]byte, n)
					if _, err := f.ReadAt(buf, int64(off)); err != nil {
						fail("read %s at %d: %v", name, off, err)
						break
					}
					if !bytes.Equal(buf, want[off:off+n]) {
						fail("%s at %d+%d: wrong bytes", name, off, n)
						break
					}
					reads.Add(1)
					if k%5 == 4 {
						time.Sleep(time.Millisecond)
					}
				}
				f.Close()
			}
		}()
	}
	// Writers and removers: new files, most removed again.
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				b := randBytes(20_000+i%7*3000, uint64(w*1_000_000+i))
				if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{}); err != nil {
					if ctx.Err() == nil {
						fail("put %s: %v", name, err)
					}
					return
				}
				if i%4 != 0 {
					if err := s.Remove(name); err != nil {
						fail("remove %s: %v", name, err)
						return
					}
				}
			}
		}()
	}
	// The remover of the interleaved files, then compaction over and over.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 24; i++ {
			for k := 0; k < 3; k++ {
				if err := s.Remove(fmt.Sprintf("tmp%02d-%d", i, k)); err != nil {
					fail("remove: %v", err)
					return
				}
			}
			if i%6 == 5 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			res, err := s.Compact(ctx, store.CompactOptions{Threshold: 0.3})
			if err != nil {
				if ctx.Err() == nil {
					fail("compact: %v", err)
				}
				return
			}
			if res.PacksRewritten > 0 {
				compactions.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	if compactions.Load() == 0 || reads.Load() == 0 {
		t.Fatalf("%d compactions rewrote packs, %d reads: the test raced nothing", compactions.Load(), reads.Load())
	}
	t.Logf("%d compactions that rewrote packs, %d verified reads", compactions.Load(), reads.Load())
	if _, err := s.Compact(context.Background(), store.CompactOptions{Threshold: 0.01}); err != nil {
		t.Fatal(err)
	}
	for name, b := range stable {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s changed", name)
		}
	}
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
