//go:build linux

package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// BenchmarkAmplify measures what hostile but valid inputs cost the daemon
// (issue 8, item 3): its peak RSS (VmHWM, reset before each phase through
// /proc/PID/clear_refs) and the time of each phase, against the daemon's
// own peak after mounting an empty store and serving a stat, measured in
// the same run. Results in docs/BENCHMARKS.md.
func BenchmarkAmplify(b *testing.B) {
	requireRoot(b)
	dir := b.TempDir()
	bigHeader := filepath.Join(dir, "tokens.mlxkv")
	writeTokenHeavySnapshot(b, bigHeader, 20_000_000)
	manyRefs := filepath.Join(dir, "refs.mlxkv")
	writeRefHeavyManifest(b, manyRefs, 200_000)
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	for b.Loop() {
		m := newMount(b)
		pid := daemonPID(b, m)
		resetPeak := func() {
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				b.Fatalf("reset the daemon's peak RSS: %v", err)
			}
		}
		dbSize := func() int64 {
			fi, err := os.Stat(filepath.Join(m.store, "kvfs.db"))
			if err != nil {
				b.Fatal(err)
			}
			return fi.Size()
		}
		timed := func(f func()) float64 {
			t0 := time.Now()
			f()
			return time.Since(t0).Seconds()
		}
		sh(b, "echo x > "+m.path("small"))
		resetPeak()
		sh(b, "stat "+m.path("small")+" > /dev/null")
		base := peakRSS(b, pid)
		b.ReportMetric(mib(base), "baseline-peak-MiB")

		// A 20M-token header: stored, then its whole view stat'ed and
		// read by 8 processes at once.
		resetPeak()
		db0 := dbSize()
		t := timed(func() { sh(b, fmt.Sprintf("cat %s > %s", bigHeader, m.path("tokens.mlxkv"))) })
		b.ReportMetric(t, "tokens-store-s")
		b.ReportMetric(mib(peakRSS(b, pid)), "tokens-store-peak-MiB")
		b.ReportMetric(mib(dbSize()-db0), "tokens-index-growth-MiB")
		fi, err := os.Stat(bigHeader)
		if err != nil {
			b.Fatal(err)
		}
		resetPeak()
		t = timed(func() {
			var wg sync.WaitGroup
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runClientOK(b, "viewstat", m.path(".kvfs/whole/tokens.mlxkv"), fmt.Sprint(fi.Size()))
				}()
			}
			wg.Wait()
		})
		b.ReportMetric(t, "tokens-view-8x-s")
		b.ReportMetric(mib(peakRSS(b, pid)), "tokens-view-8x-peak-MiB")

		// A manifest of 200,000 block references.
		sh(b, "mkdir "+m.path("ns"))
		resetPeak()
		db0 = dbSize()
		t = timed(func() { sh(b, fmt.Sprintf("cat %s > %s", manyRefs, m.path("ns/refs.mlxkv"))) })
		b.ReportMetric(t, "refs-store-s")
		b.ReportMetric(mib(peakRSS(b, pid)), "refs-store-peak-MiB")
		b.ReportMetric(mib(dbSize()-db0), "refs-index-growth-MiB")

		// 400 setxattr of 64 KiB (those past the limit refused), then 20 x
		// (stat + listxattr).
		sh(b, "echo x > "+m.path("x"))
		resetPeak()
		var set, list float64
		var accepted int
		fmt.Sscan(runClientOK(b, "xattrbench", m.path("x")), &set, &list, &accepted)
		b.ReportMetric(set, "xattr-400-set-s")
		b.ReportMetric(float64(accepted), "xattr-accepted")
		b.ReportMetric(list, "xattr-20-stat+list-s")
		b.ReportMetric(mib(peakRSS(b, pid)), "xattr-peak-MiB")
	}
}

func init() {
	clients["xattrbench"] = xattrBenchClient
}

// xattrBenchClient FILE: setxattr of 400 values of 64 KiB (ENOSPC counts as
// done), then 20 x (stat + listxattr); prints both times in seconds and
// how many values were accepted.
func xattrBenchClient(args []string) error {
	f := args[0]
	val := make([]byte, 64<<10)
	accepted := 0
	t0 := time.Now()
	for i := 0; i < 400; i++ {
		err := syscall.Setxattr(f, fmt.Sprintf("user.a%d", i), val, 0)
		if err == nil {
			accepted++
		} else if !errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("setxattr %d: %w", i, err)
		}
	}
	set := time.Since(t0).Seconds()
	t0 = time.Now()
	buf := make([]byte, 64<<10)
	for i := 0; i < 20; i++ {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			return err
		}
		if _, err := syscall.Listxattr(f, buf); err != nil {
			return fmt.Errorf("listxattr: %w", err)
		}
	}
	fmt.Println(set, time.Since(t0).Seconds(), accepted)
	return nil
}

// writeTokenHeavySnapshot writes a valid whole-layout snapshot of a
// 4-token cache whose header lists n tokens of one digit (about 2n bytes
// of header: 20M tokens make a 38 MiB file).
func writeTokenHeavySnapshot(t testing.TB, path string, n int) {
	t.Helper()
	h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(4, 1))
	h.Tokens = make([]uint32, n)
	for i := range h.Tokens {
		h.Tokens[i] = uint32(i % 10)
	}
	if _, _, err := (&mlx.Writer{}).Write(path, h, tensors); err != nil {
		t.Fatal(err)
	}
}

// writeRefHeavyManifest writes a valid format-5 manifest listing refs
// distinct block references of 2 bytes (the blocks themselves are not
// written: the manifest alone is what the daemon indexes).
func writeRefHeavyManifest(t testing.TB, path string, refs int) {
	t.Helper()
	// Two tensors (K, V) of refs/2 bf16 elements each.
	m := snapgen.Model{ID: "test/refs", Layers: 1, KVHeads: 1, HeadDim: 100, DType: mlx.BFloat16}
	h, tensors := m.Snapshot(snapgen.Tokens(refs/200, 1))
	tmp := filepath.Join(t.TempDir(), "m.mlxkv")
	out, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 1 << 30}).Write(tmp, h, tensors)
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for _, sl := range out.Slots() {
		sl.Blocks = make([]mlx.BlockRef, 0, sl.Bytes/2)
		for j := int64(0); j < sl.Bytes/2; j++ {
			sum := sha256.Sum256(fmt.Appendf(nil, "block %d", k))
			k++
			sl.Blocks = append(sl.Blocks, mlx.BlockRef{Hash: hex.EncodeToString(sum[:]), Bytes: 2})
		}
	}
	js, err := out.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	p := mlx.Prefix{HeaderLen: uint32(len(js)), DataStart: uint32(mlx.PrefixLen + len(js)), HeaderHash: mlx.Hash(js)}
	buf, _ := p.AppendBinary(nil)
	if err := os.WriteFile(path, append(buf, js...), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := mlx.ReadFile(path); err != nil {
		t.Fatal(err)
	} else if got := len(s.Header.Slots()[0].Blocks) + len(s.Header.Slots()[1].Blocks); got != refs {
		t.Fatalf("%d refs, want %d", got, refs)
	}
}
