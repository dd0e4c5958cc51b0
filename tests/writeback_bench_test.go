//go:build linux

package tests

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkWritebackCache compares a mount with the kernel's writeback
// cache (-o writeback_cache) with a default mount and the plain disk, in
// one run, in interleaved rounds so that the machine's noise falls on all
// three: durable files written as engines do (create, one write, fsync,
// close, rename; median latency) and a 64 MiB file written sequentially in
// 4 KiB, 128 KiB and 1 MiB writes and fsynced (median rate). Results in
// docs/BENCHMARKS.md.
//
//	go test ./tests -run '^$' -bench BenchmarkWritebackCache -benchtime 1x
func BenchmarkWritebackCache(b *testing.B) {
	requireRoot(b)
	targets := []struct{ name, dir string }{
		{"default", newMount(b).mnt}, {"writeback", newMount(b, "-o", "writeback_cache").mnt}, {"plain", b.TempDir()}}
	type measure struct {
		name, unit string
		rounds     int
		run        func(dir string, round int) (float64, error)
	}
	durable := func(size, files int) func(string, int) (float64, error) {
		buf := make([]byte, size)
		rand.Read(buf)
		return func(dir string, round int) (float64, error) {
			var lat []float64
			for i := range files {
				tmp := filepath.Join(dir, fmt.Sprintf("tmp-%d-%d-%d", size, round, i))
				t := time.Now()
				f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					return 0, err
				}
				if _, err := f.Write(buf); err != nil {
					return 0, err
				}
				if err := f.Sync(); err != nil {
					return 0, err
				}
				if err := f.Close(); err != nil {
					return 0, err
				}
				if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("blk-%d-%d-%d", size, round, i))); err != nil {
					return 0, err
				}
				lat = append(lat, float64(time.Since(t).Microseconds())/1000)
			}
			return median(lat), nil
		}
	}
	sequential := func(bs int) func(string, int) (float64, error) {
		const total = 64 << 20
		buf := make([]byte, bs)
		rand.Read(buf)
		return func(dir string, round int) (float64, error) {
			p := filepath.Join(dir, fmt.Sprintf("seq-%d-%d", bs, round))
			t := time.Now()
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return 0, err
			}
			for off := 0; off < total; off += bs {
				if _, err := f.Write(buf); err != nil {
					return 0, err
				}
			}
			if err := f.Sync(); err != nil {
				return 0, err
			}
			if err := f.Close(); err != nil {
				return 0, err
			}
			rate := total / time.Since(t).Seconds() / 1e6
			return rate, os.Remove(p)
		}
	}
	measures := []measure{
		{"durable 64 KiB file, median", "ms", 4, durable(64<<10, 50)},
		{"durable 1 MiB file, median", "ms", 4, durable(1<<20, 15)},
		{"64 MiB in 4 KiB writes + fsync", "MB/s", 5, sequential(4 << 10)},
		{"64 MiB in 128 KiB writes + fsync", "MB/s", 5, sequential(128 << 10)},
		{"64 MiB in 1 MiB writes + fsync", "MB/s", 5, sequential(1 << 20)},
	}
	fmt.Println("\n| measure | default mount | writeback_cache | plain | writeback / default |")
	fmt.Println("|---|---|---|---|---|")
	for mi, m := range measures {
		got := make([][]float64, len(targets))
		for r := range m.rounds {
			for i, tg := range targets {
				v, err := m.run(tg.dir, r)
				if err != nil {
					b.Fatalf("%s on %s: %v", m.name, tg.name, err)
				}
				got[i] = append(got[i], v)
			}
		}
		med := make([]float64, len(targets))
		for i, tg := range targets {
			med[i] = median(got[i])
			b.ReportMetric(med[i], fmt.Sprintf("m%d-%s-%s", mi, tg.name, m.unit))
		}
		fmt.Printf("| %s | %.3g %s | %.3g %s | %.3g %s | %.2f× |\n", m.name, med[0], m.unit, med[1], m.unit, med[2], m.unit, med[1]/med[0])
	}
}
