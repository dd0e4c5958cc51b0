package journal

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

const benchRecord = 64 << 10

// preallocated makes a file of size bytes written with zeros and synced:
// what a segment is before records overwrite it.
func preallocated(b *testing.B, path string, size int64) *os.File {
	b.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return f
}

// newFileFsync is what a plain disk does for a durable small file:
// create, write, fsync, close.
func newFileFsync(b *testing.B, path string, p []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(p); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)]
}

// BenchmarkSync: a 64 KiB record appended and synced, against, in the
// same run and on the same disk, (a) a new 64 KiB file written and
// fsynced, (b) 64 KiB written into a preallocated file and fdatasynced
// (the floor: one data flush), (c) 64 KiB appended to a growing file and
// fdatasynced (what a journal without preallocation would pay: the size
// change goes through ext4's journal). The four alternate within each
// iteration.
// Reported: median and p99 latency of each, and the ratios of the
// medians (journal / baseline; below 1 is faster).
func BenchmarkSync(b *testing.B) {
	dir := b.TempDir()
	j, err := Open(filepath.Join(dir, "journal"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o700); err != nil {
		b.Fatal(err)
	}
	const preSize = 64 << 20
	pre := preallocated(b, filepath.Join(dir, "prealloc"), preSize)
	defer pre.Close()
	p := make([]byte, benchRecord)
	rand.Read(p)
	grow, err := os.OpenFile(filepath.Join(dir, "growing"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer grow.Close()
	var jl, nl, pl, gl []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for k := range 4 {
			switch (i + k) % 4 {
			case 0:
				t0 := time.Now()
				seq, err := j.Append(p)
				if err == nil {
					err = j.Sync(seq)
				}
				if err != nil {
					b.Fatal(err)
				}
				jl = append(jl, time.Since(t0))
			case 1:
				t0 := time.Now()
				newFileFsync(b, filepath.Join(files, fmt.Sprint(i)), p)
				nl = append(nl, time.Since(t0))
			case 2:
				t0 := time.Now()
				if _, err := pre.WriteAt(p, int64(i*benchRecord)%preSize); err != nil {
					b.Fatal(err)
				}
				if err := fdatasync(pre); err != nil {
					b.Fatal(err)
				}
				pl = append(pl, time.Since(t0))
			case 3:
				t0 := time.Now()
				if _, err := grow.WriteAt(p, int64(i*benchRecord)); err != nil {
					b.Fatal(err)
				}
				if err := fdatasync(grow); err != nil {
					b.Fatal(err)
				}
				gl = append(gl, time.Since(t0))
			}
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	b.ReportMetric(us(quantile(jl, 0.5)), "journal-µs-p50")
	b.ReportMetric(us(quantile(jl, 0.99)), "journal-µs-p99")
	b.ReportMetric(us(quantile(nl, 0.5)), "newfile-µs-p50")
	b.ReportMetric(us(quantile(nl, 0.99)), "newfile-µs-p99")
	b.ReportMetric(us(quantile(pl, 0.5)), "prealloc-µs-p50")
	b.ReportMetric(us(quantile(pl, 0.99)), "prealloc-µs-p99")
	b.ReportMetric(us(quantile(gl, 0.5)), "growing-µs-p50")
	b.ReportMetric(us(quantile(gl, 0.99)), "growing-µs-p99")
	b.ReportMetric(float64(quantile(jl, 0.5))/float64(quantile(nl, 0.5)), "journal/newfile")
	b.ReportMetric(float64(quantile(jl, 0.5))/float64(quantile(gl, 0.5)), "journal/growing")
	b.ReportMetric(float64(quantile(jl, 0.5))/float64(quantile(pl, 0.5)), "journal/prealloc")
}

// BenchmarkGroupCommit: 8 writers, each appending a 64 KiB record and
// syncing it, b.N times each, against 8 writers each writing 64 KiB into
// its own preallocated file and fdatasyncing it, and 8 writers each
// creating, writing and fsyncing a new 64 KiB file. Reported: records per
// second of each and the ratios (journal / baseline; above 1 is faster),
// and how many records one journal fdatasync covered.
func BenchmarkGroupCommit(b *testing.B) {
	const writers = 8
	dir := b.TempDir()
	j, err := Open(filepath.Join(dir, "journal"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	const preSize = 16 << 20
	var pres []*os.File
	for w := range writers {
		f := preallocated(b, filepath.Join(dir, fmt.Sprintf("prealloc%d", w)), preSize)
		defer f.Close()
		pres = append(pres, f)
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("files%d", w)), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	p := make([]byte, benchRecord)
	rand.Read(p)
	run := func(n int, op func(w, i int)) time.Duration {
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := range writers {
			wg.Go(func() {
				for i := range n {
					op(w, i)
				}
			})
		}
		wg.Wait()
		return time.Since(t0)
	}
	journalOp := func(w, i int) {
		seq, err := j.Append(p)
		if err == nil {
			err = j.Sync(seq)
		}
		if err != nil {
			b.Error(err)
		}
	}
	preOp := func(w, i int) {
		if _, err := pres[w].WriteAt(p, int64(i*benchRecord)%preSize); err != nil {
			b.Error(err)
		}
		if err := fdatasync(pres[w]); err != nil {
			b.Error(err)
		}
	}
	round := 0
	newOp := func(w, i int) {
		newFileFsync(b, filepath.Join(dir, fmt.Sprintf("files%d", w), fmt.Sprintf("%d-%d", round, i)), p)
	}
	var jt, pt, nt time.Duration
	var records int
	syncs0 := j.Stats().Syncs
	b.ResetTimer()
	for b.Loop() {
		// Rounds of 16 records per writer, the order rotating.
		for k := range 3 {
			switch (round + k) % 3 {
			case 0:
				jt += run(16, journalOp)
			case 1:
				pt += run(16, preOp)
			case 2:
				nt += run(16, newOp)
			}
		}
		round++
		records += 16 * writers
	}
	syncs := j.Stats().Syncs - syncs0
	rate := func(d time.Duration) float64 { return float64(records) / d.Seconds() }
	b.ReportMetric(rate(jt), "journal-rec/s")
	b.ReportMetric(rate(pt), "prealloc-rec/s")
	b.ReportMetric(rate(nt), "newfile-rec/s")
	b.ReportMetric(rate(jt)/rate(pt), "journal/prealloc")
	b.ReportMetric(rate(jt)/rate(nt), "journal/newfile")
	b.ReportMetric(float64(records)/float64(syncs), "rec/fdatasync")
}
