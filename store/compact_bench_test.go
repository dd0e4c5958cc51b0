package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/store"
)

// BenchmarkReclaim: removing one snapshot and reclaiming its bytes, in a
// store of 10,000 snapshots and in one of 100, measured in the same run
// (docs/BENCHMARKS.md, "Compaction and reclaim"). Each iteration stores a
// 2 MiB snapshot of its own (not timed), then times its removal until its
// bytes are free on disk: the release, the punches (WaitReclaim) and the
// removal of the packs left dead, checked by the pack files' allocated
// blocks. The work should follow the garbage, not the store: the ratio
// (10,000 / 100, of the medians) should stay at most 2.
//
// It also times one compaction pass (Compact, threshold 0.5) after each
// removal, reported apart (compact-ns-*): a pass that finds a pack to
// rewrite reads every chunk record to find the pack's live chunks, so its
// cost grows with the store.
func BenchmarkReclaim(b *testing.B) {
	small := reclaimStore(b, 100)
	large := reclaimStore(b, 10_000)
	var tSmall, tLarge, cSmall, cLarge []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, c := reclaimOnce(b, small, i)
		tSmall, cSmall = append(tSmall, d), append(cSmall, c)
		d, c = reclaimOnce(b, large, i)
		tLarge, cLarge = append(tLarge, d), append(cLarge, c)
	}
	b.StopTimer()
	ms, ml := median(tSmall), median(tLarge)
	b.ReportMetric(float64(ms.Nanoseconds()), "ns-100")
	b.ReportMetric(float64(ml.Nanoseconds()), "ns-10000")
	b.ReportMetric(float64(ml)/float64(ms), "ratio")
	b.ReportMetric(float64(median(cSmall).Nanoseconds()), "compact-ns-100")
	b.ReportMetric(float64(median(cLarge).Nanoseconds()), "compact-ns-10000")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// reclaimStore is a store of n snapshots of 16 tokens each (about 17 KB),
// each with content of its own.
func reclaimStore(b *testing.B, n int) *store.Store {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "store")
	if err := store.Init(dir, 16<<10); err != nil {
		b.Fatal(err)
	}
	s, err := store.Open(dir, store.Options{PackBytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	tmp := filepath.Join(b.TempDir(), "snap.mlxkv")
	for i := 0; i < n; i++ {
		if err := snapgen.Tiny.WriteFile(tmp, snapgen.Tokens(16, uint64(i)+1)); err != nil {
			b.Fatal(err)
		}
		putFile(b, s, tmp, fmt.Sprintf("d%d/s%05d.mlxkv", i%100, i))
	}
	s.WaitReclaim()
	return s
}

func putFile(b *testing.B, s *store.Store, src, path string) {
	b.Helper()
	f, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.Put(context.Background(), f, fi.Size(), path, store.PutOptions{}); err != nil {
		b.Fatal(err)
	}
}

// reclaimOnce stores a 2 MiB snapshot, then times its removal until its
// bytes are free, and a compaction pass after it.
func reclaimOnce(b *testing.B, s *store.Store, i int) (time.Duration, time.Duration) {
	b.Helper()
	tmp := filepath.Join(b.TempDir(), "big.mlxkv")
	if err := snapgen.Tiny.WriteFile(tmp, snapgen.Tokens(2048, uint64(1_000_000+i))); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(tmp)
	putFile(b, s, tmp, "big.mlxkv")
	s.WaitReclaim()
	before := storePacksDisk(b, s.Dir())
	start := time.Now()
	if err := s.Remove("big.mlxkv"); err != nil {
		b.Fatal(err)
	}
	s.WaitReclaim()
	took := time.Since(start)
	if freed := before - storePacksDisk(b, s.Dir()); freed < fi.Size()*9/10 {
		b.Fatalf("removing a %d-byte snapshot freed %d bytes of packs", fi.Size(), freed)
	}
	start = time.Now()
	if _, err := s.Compact(context.Background(), store.CompactOptions{}); err != nil {
		b.Fatal(err)
	}
	return took, time.Since(start)
}

func storePacksDisk(b *testing.B, dir string) int64 {
	b.Helper()
	packs, err := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, p := range packs {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}
