package store_test

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// The benchmarks compare each store operation with a baseline measured in
// the same iteration, on the same disk, and report the ratio (higher is
// better for throughput ratios): the machines are noisy, so only ratios
// within one run mean anything. See docs/BENCHMARKS.md.

// llamaTokens is the benchmark snapshot's length: 8192 tokens of a
// Llama-3-8B-shaped cache, 1 GiB.
const llamaTokens = 8192

var (
	llamaOnce sync.Once
	llamaPath string
)

// llamaSnapshot writes the 1 GiB snapshot once per process.
func llamaSnapshot(b *testing.B) string {
	llamaOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kvfs-bench-")
		if err != nil {
			b.Fatal(err)
		}
		llamaPath = filepath.Join(dir, "llama.mlxkv")
		if err := snapgen.Llama3_8B.WriteFile(llamaPath, snapgen.Tokens(llamaTokens, 1)); err != nil {
			b.Fatal(err)
		}
	})
	return llamaPath
}

func newBenchStore(b *testing.B) *store.Store {
	dir := filepath.Join(b.TempDir(), "store")
	if err := store.Init(dir, store.DefaultChunkSize); err != nil {
		b.Fatal(err)
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// copyFsync is the baseline of ingest: io.Copy to a new file on the same
// disk, then fsync.
func copyFsync(b *testing.B, src, dst string) {
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Sync(); err != nil {
		b.Fatal(err)
	}
	out.Close()
}

// BenchmarkIngest: kvfs put of the 1 GiB snapshot into an empty store vs
// copying the file with io.Copy + fsync. Target: ratio >= 0.7. The two
// alternate which goes first, and the files of each iteration are removed
// and synced away before the next one starts, so that neither pays for the
// other's writeback or discards.
func BenchmarkIngest(b *testing.B) {
	src := llamaSnapshot(b)
	fi, _ := os.Stat(src)
	round := func(i int) (copyT, ingestT time.Duration) {
		dir := b.TempDir()
		s := newBenchStore(b)
		syscall.Sync()
		timeCopy := func() {
			t := time.Now()
			copyFsync(b, src, filepath.Join(dir, "copy"))
			copyT = time.Since(t)
		}
		timeIngest := func() {
			t := time.Now()
			if _, _, err := s.PutFile(ctx, src, "fp/ns/a.mlxkv", store.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			ingestT = time.Since(t)
		}
		if i%2 == 0 {
			timeCopy()
			timeIngest()
		} else {
			timeIngest()
			timeCopy()
		}
		s.Close()
		os.RemoveAll(dir)
		os.RemoveAll(s.Dir())
		syscall.Sync()
		return copyT, ingestT
	}
	// One untimed round first: the first writes of a process (fresh heap,
	// page cache still settling from writing the snapshot) are slower.
	round(1)
	var copyT, ingestT time.Duration
	i := 0
	for b.Loop() {
		c, in := round(i)
		copyT += c
		ingestT += in
		i++
	}
	mb := float64(fi.Size()) * float64(b.N) / 1e6
	b.ReportMetric(mb/copyT.Seconds(), "copy-MB/s")
	b.ReportMetric(mb/ingestT.Seconds(), "ingest-MB/s")
	b.ReportMetric(copyT.Seconds()/ingestT.Seconds(), "ingest/copy")
}

// BenchmarkReadAt: sequential 1 MiB ReadAt of the committed snapshot vs the
// plain file, page cache warm. Target: ratio >= 0.8.
func BenchmarkReadAt(b *testing.B) {
	src := llamaSnapshot(b)
	s := newBenchStore(b)
	if _, _, err := s.PutFile(ctx, src, "a.mlxkv", store.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	f, err := s.Open("a.mlxkv")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	plain, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	buf := make([]byte, 1<<20)
	readAll := func(r io.ReaderAt, size int64) time.Duration {
		t := time.Now()
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off); err != nil && err != io.EOF {
				b.Fatal(err)
			}
		}
		return time.Since(t)
	}
	readAll(plain, f.Size()) // warm both
	readAll(f, f.Size())
	var plainT, storeT time.Duration
	for b.Loop() {
		plainT += readAll(plain, f.Size())
		storeT += readAll(f, f.Size())
	}
	mb := float64(f.Size()) * float64(b.N) / 1e6
	b.ReportMetric(mb/plainT.Seconds(), "plain-MB/s")
	b.ReportMetric(mb/storeT.Seconds(), "kvfs-MB/s")
	b.ReportMetric(plainT.Seconds()/storeT.Seconds(), "kvfs/plain")
}

// BenchmarkPrefixGrowth: ten snapshots of one conversation, each 10% more
// tokens than the last. Reports stored bytes over unique bytes (target
// <= 1.02) and the largest ratio of an ingest's new bytes to its new
// tokens' bytes plus header (1.00 means only new tokens were written).
func BenchmarkPrefixGrowth(b *testing.B) {
	m := snapgen.Llama3_8B
	for b.Loop() {
		b.StopTimer()
		s := newBenchStore(b)
		dir := b.TempDir()
		tokens := snapgen.Tokens(2000, 3)
		var unique int64
		worst := 0.0
		for i := 0; i < 10; i++ {
			p := filepath.Join(dir, "s.mlxkv")
			if err := m.WriteFile(p, tokens); err != nil {
				b.Fatal(err)
			}
			snap, err := mlx.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			header := int64(mlx.PrefixLen) + int64(snap.Prefix.HeaderLen)
			prev := 0
			if i > 0 {
				prev = len(tokens) * 10 / 11
			}
			b.StartTimer()
			_, st, err := s.PutFile(ctx, p, filepath.Join("fp", "ns", string(rune('a'+i))+".mlxkv"), store.PutOptions{})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			want := int64(len(tokens)-prev)*m.BytesPerToken() + header
			worst = max(worst, float64(st.NewBytes)/float64(want))
			unique += header
			if i < 9 {
				tokens = snapgen.Extend(tokens, len(tokens)/10, uint64(i+10))
			}
		}
		unique += int64(len(tokens)) * m.BytesPerToken()
		st, err := s.Stats()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.StoredBytes)/float64(unique), "stored/unique")
		b.ReportMetric(worst, "max-new/expected")
		b.ReportMetric(float64(st.LogicalBytes)/float64(st.StoredBytes), "dedup-ratio")
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkBranches: A = P + a and B = P + b from one 4000-token prefix P
// that is never saved alone. Reports B's stored bytes beyond its own new
// tokens, in chunks per row (target <= 1).
func BenchmarkBranches(b *testing.B) {
	m := snapgen.Llama3_8B
	rows := int64(m.Layers * 2 * m.KVHeads)
	for b.Loop() {
		b.StopTimer()
		s := newBenchStore(b)
		dir := b.TempDir()
		p := snapgen.Tokens(4000, 5)
		var last *store.PutStats
		for i, tokens := range [][]uint32{snapgen.Extend(p, 300, 6), snapgen.Extend(p, 500, 7)} {
			path := filepath.Join(dir, "s.mlxkv")
			if err := m.WriteFile(path, tokens); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			_, st, err := s.PutFile(ctx, path, filepath.Join("fp", "ns", string(rune('a'+i))+".mlxkv"), store.PutOptions{})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			last = st
		}
		snap, _ := mlx.ReadFile(filepath.Join(dir, "s.mlxkv"))
		own := 500*m.BytesPerToken() + int64(mlx.PrefixLen) + int64(snap.Prefix.HeaderLen)
		extra := float64(last.NewBytes-own) / float64(store.DefaultChunkSize) / float64(rows)
		b.ReportMetric(extra, "extra-chunks/row")
		s.Close()
		b.StartTimer()
	}
}
