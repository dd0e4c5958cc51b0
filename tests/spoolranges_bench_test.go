//go:build linux

package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The benchmarks of cost proportional to the change (docs/BENCHMARKS.md):
// a small change to a large file, and a large new file committed with and
// without hashing while writing, each against a plain file on the local
// disk in the same run. Every writer is a separate process.

func init() {
	// spoolbench FILE ITERS SEED: ITERS times open the existing FILE
	// read-write, write 4 KiB at a random unaligned offset, fsync, close;
	// print the median seconds of open+write, fsync and close.
	clients["spoolbench"] = func(args []string) error {
		path, iters := args[0], int(atoi64(args[1]))
		r := rand.New(rand.NewPCG(uint64(atoi64(args[2])), 3))
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		buf := spoolRand(4096, 9)
		var open, fsync, closing []float64
		for range iters {
			off := r.Int64N(fi.Size() - 4096)
			t0 := time.Now()
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(buf, off); err != nil {
				return err
			}
			t1 := time.Now()
			if err := f.Sync(); err != nil {
				return err
			}
			t2 := time.Now()
			if err := f.Close(); err != nil {
				return err
			}
			t3 := time.Now()
			open = append(open, t1.Sub(t0).Seconds())
			fsync = append(fsync, t2.Sub(t1).Seconds())
			closing = append(closing, t3.Sub(t2).Seconds())
		}
		fmt.Println(median(open), median(fsync), median(closing))
		return nil
	}
	// spoolwritenew FILE SIZE: create FILE, write SIZE bytes in 1 MiB
	// writes, fsync, close; print the seconds of the writes and of the
	// fsync.
	clients["spoolwritenew"] = func(args []string) error {
		b := spoolRand(int(atoi64(args[1])), uint64(time.Now().UnixNano()))
		t0 := time.Now()
		f, err := os.Create(args[0])
		if err != nil {
			return err
		}
		for off := 0; off < len(b); off += 1 << 20 {
			if _, err := f.Write(b[off:min(off+1<<20, len(b))]); err != nil {
				return err
			}
		}
		t1 := time.Now()
		if err := f.Sync(); err != nil {
			return err
		}
		t2 := time.Now()
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Println(t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds())
		return nil
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// threeFloats parses a client's three numbers.
func threeFloats(t testing.TB, out string) (a, b, c float64) {
	if _, err := fmt.Sscan(out, &a, &b, &c); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	return
}

// BenchmarkSmallChange: open an existing 256 MiB file read-write, write
// 4 KiB at a random offset, fsync, close — 20 times, medians — in the mount
// and on the plain disk.
func BenchmarkSmallChange(b *testing.B) {
	requireRoot(b)
	const size = 256 << 20
	plain := filepath.Join(b.TempDir(), "big")
	m := newMount(b)
	kv := m.path("big")
	runClientOK(b, "spoolfill", plain, strconv.Itoa(size), "1")
	runClientOK(b, "spoolfill", kv, strconv.Itoa(size), "1")
	for b.Loop() {
		po, pf, pc := threeFloats(b, runClientOK(b, "spoolbench", plain, "20", "1"))
		ko, kf, kc := threeFloats(b, runClientOK(b, "spoolbench", kv, "20", "1"))
		b.Logf("4 KiB change in 256 MiB, median of 20: open+write %.2f ms (plain %.3f ms), fsync %.2f ms (plain %.2f ms), close %.2f ms (plain %.3f ms)",
			1e3*ko, 1e3*po, 1e3*kf, 1e3*pf, 1e3*kc, 1e3*pc)
		b.ReportMetric(1e3*ko, "open+write-ms")
		b.ReportMetric(1e3*kf, "fsync-ms")
		b.ReportMetric(1e3*po, "plain-open+write-ms")
		b.ReportMetric(1e3*pf, "plain-fsync-ms")
		b.ReportMetric((ko+kf+kc)/(po+pf+pc), "x-plain-time")
	}
}

// BenchmarkHashWhileWriting: a new 256 MiB file written in 1 MiB writes
// and fsynced, in a mount that hashes chunks as they are written, in one
// that leaves hashing to the commit (--no-write-hash), and on the plain
// disk; best of three each.
func BenchmarkHashWhileWriting(b *testing.B) {
	requireRoot(b)
	const size = 256 << 20
	dir := b.TempDir()
	hash, nohash := newMount(b), newMount(b, "--no-write-hash")
	run := func(path string) (w, f float64) {
		w, f = 1e9, 1e9
		for range 3 {
			var ww, ff float64
			if _, err := fmt.Sscan(runClientOK(b, "spoolwritenew", path, strconv.Itoa(size)), &ww, &ff); err != nil {
				b.Fatal(err)
			}
			if ww+ff < w+f {
				w, f = ww, ff
			}
			if err := os.Remove(path); err != nil {
				b.Fatal(err)
			}
		}
		return w, f
	}
	for b.Loop() {
		pw, pf := run(filepath.Join(dir, "new"))
		hw, hf := run(hash.path("new"))
		nw, nf := run(nohash.path("new"))
		b.Logf("new 256 MiB file: write %.0f ms + fsync %.0f ms hashing while writing; %.0f + %.0f ms hashing at the commit; plain %.0f + %.0f ms",
			1e3*hw, 1e3*hf, 1e3*nw, 1e3*nf, 1e3*pw, 1e3*pf)
		b.ReportMetric(1e3*hf, "fsync-ms")
		b.ReportMetric(1e3*nf, "fsync-nohash-ms")
		b.ReportMetric((hw+hf)/(nw+nf), "x-nohash-time")
		b.ReportMetric((pw+pf)/(hw+hf), "x-plain-speed")
	}
}
