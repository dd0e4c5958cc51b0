//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
)

// BenchmarkWriteTable measures the write protocols of issue 9's table
// ("Benchmarks"), each replayed by client processes of this test binary
// (bench_write_clients_test.go) against a fresh kvfs mount and against a
// plain directory on the same disk, in the same run, interleaved round by
// round so that the machine's noise falls on both. Every sub-benchmark
// reports its numbers as metrics; the whole table, with the targets
// and whether each is met, is printed at the end:
//
//	go test ./tests -run '^$' -bench BenchmarkWriteTable -benchtime 1x -timeout 60m
//
// KVFS_BENCH_QUICK=1 shrinks every size for a smoke run;
// KVFS_BENCH_SNAPSHOT_MIB sets the whole-layout and cp snapshot size
// (default 1024, 256 in quick mode); KVFS_BENCH_MOUNT_ARGS (split at
// spaces) adds arguments to the kvfs mounts, e.g. "-o writeback_cache".
// KVFS_BENCH_FLOOR=loopback puts go-fuse's loopback file system of a plain
// directory (serveLoopbackFS) where the kvfs mount was: the table then
// shows what FUSE alone costs on the machine for the same protocols, the
// floor under kvfs's ratios (the packs row, which counts kvfs's pack
// files, does not run). Results in docs/BENCHMARKS.md.
func BenchmarkWriteTable(b *testing.B) {
	requireRoot(b)
	cfg := newWriteBenchConfig(b)
	tab := &writeTable{rows: map[string]writeRow{}}
	b.Run("durable-64KiB", func(b *testing.B) { benchDurable(b, tab, cfg, 64<<10, cfg.durable64, 2, true) })
	b.Run("durable-1MiB", func(b *testing.B) { benchDurable(b, tab, cfg, 1<<20, cfg.durable1M, 1.5, false) })
	b.Run("blocks-series", func(b *testing.B) { benchBlocksSeries(b, tab, cfg) })
	b.Run("whole-snapshot", func(b *testing.B) { benchWholeSnapshot(b, tab, cfg) })
	b.Run("cp-snapshot", func(b *testing.B) { benchCp(b, tab, cfg) })
	b.Run("writers-8", func(b *testing.B) { benchConcurrentDurable(b, tab, cfg) })
	b.Run("fsync-writers-4", func(b *testing.B) { benchFsyncWriters(b, tab, cfg) })
	b.Run("metadata", func(b *testing.B) { benchMetadata(b, tab, cfg) })
	if !benchFloor() {
		b.Run("packs", func(b *testing.B) { benchPacks(b, tab, cfg) })
	}
	tab.print(os.Stdout, cfg)
}

// benchFloor reports whether the table measures go-fuse's loopback file
// system instead of kvfs (KVFS_BENCH_FLOOR=loopback).
func benchFloor() bool { return os.Getenv("KVFS_BENCH_FLOOR") == "loopback" }

// newBenchMount is the mount a row measures: a fresh kvfs mount, or, with
// KVFS_BENCH_FLOOR=loopback, go-fuse's loopback file system of a fresh
// directory on the same disk, mounted by a client process and unmounted
// at cleanup.
func newBenchMount(b *testing.B) *mount {
	if !benchFloor() {
		return newMount(b, benchMountArgs()...)
	}
	requireRoot(b)
	dir := b.TempDir()
	m := &mount{mnt: filepath.Join(dir, "mnt")}
	backing := filepath.Join(dir, "backing")
	for _, d := range []string{m.mnt, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	lo := startServingClient(b, "loopbackfs", backing, m.mnt)
	b.Cleanup(func() {
		lo.Process.Signal(syscall.SIGTERM)
		if err := lo.Wait(); err != nil {
			b.Errorf("loopbackfs: %v", err)
		}
	})
	return m
}

// benchMountArgs are the mount arguments of KVFS_BENCH_MOUNT_ARGS.
func benchMountArgs() []string { return strings.Fields(os.Getenv("KVFS_BENCH_MOUNT_ARGS")) }

// writeBenchConfig holds the sizes of one run.
type writeBenchConfig struct {
	quick         bool
	rounds        int // interleaved plain/kvfs rounds of the durable-file rows
	durable64     int // 64 KiB durable files per target
	durable1M     int // 1 MiB durable files per target
	seriesBase    int // blocks series: snapshots of 1, 2, 3, 4 × seriesBase tokens
	collectRounds int
	snapshotMiB   int // whole-layout and cp snapshot size
	snapRounds    int
	writerFiles   int // durable files per writer, 8 writers
	fsyncFileMiB  int // 4 writers' file size
	fsyncWrites   int // writes per writer
	metaFiles     int
	smallFiles    int
}

func newWriteBenchConfig(t testing.TB) writeBenchConfig {
	c := writeBenchConfig{rounds: 8, durable64: 800, durable1M: 96, seriesBase: 1000, collectRounds: 21,
		snapshotMiB: 1024, snapRounds: 2, writerFiles: 100, fsyncFileMiB: 256, fsyncWrites: 256,
		metaFiles: 10000, smallFiles: 10000}
	if os.Getenv("KVFS_BENCH_QUICK") == "1" {
		c = writeBenchConfig{quick: true, rounds: 2, durable64: 100, durable1M: 20, seriesBase: 250, collectRounds: 5,
			snapshotMiB: 256, snapRounds: 2, writerFiles: 25, fsyncFileMiB: 64, fsyncWrites: 128,
			metaFiles: 1000, smallFiles: 1000}
	}
	if v := os.Getenv("KVFS_BENCH_SNAPSHOT_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KVFS_BENCH_SNAPSHOT_MIB=%q: want a positive number of MiB", v)
		}
		c.snapshotMiB = n
	}
	return c
}

// snapshotTokens is the token count of a Llama-3-8B-shaped snapshot of
// about snapshotMiB (128 KiB per token).
func (c writeBenchConfig) snapshotTokens() int { return c.snapshotMiB * 8 }

func (c writeBenchConfig) snapshotSize() string {
	if c.snapshotMiB%1024 == 0 {
		return fmt.Sprintf("%d GiB", c.snapshotMiB/1024)
	}
	return fmt.Sprintf("%d MiB", c.snapshotMiB)
}

// writeRow is one line of the table. ratio is kvfs over plain: of times
// where the target is an upper bound (le), of rates where it is a lower
// bound; for the pack row, the pack count over its bound.
type writeRow struct {
	measure           string
	key               string // metric name prefix
	kvfs, plain       float64
	unit              string // of kvfs and plain
	plainText         string // shown instead of plain when set
	ratio             float64
	le                bool
	limit             float64 // 0: no target (information only)
	target            string
	kvfsNote, comment string
}

func (r writeRow) verdict() string {
	switch {
	case r.limit == 0:
		return "–"
	case r.le && r.ratio <= r.limit, !r.le && r.ratio >= r.limit:
		return "pass"
	}
	return "FAIL"
}

// writeTable collects the rows of the sub-benchmarks in the order they
// first report (a sub-benchmark run again replaces its rows).
type writeTable struct {
	order []string
	rows  map[string]writeRow
}

// add records r and reports it as metrics of b.
func (t *writeTable) add(b *testing.B, r writeRow) {
	if _, ok := t.rows[r.measure]; !ok {
		t.order = append(t.order, r.measure)
	}
	t.rows[r.measure] = r
	b.ReportMetric(r.kvfs, r.key+"-kvfs-"+r.unit)
	if r.plainText == "" {
		b.ReportMetric(r.plain, r.key+"-plain-"+r.unit)
	}
	b.ReportMetric(r.ratio, r.key+"-ratio")
}

// wbTimeRow is a row whose kvfs and plain are seconds (shown in unit ms or
// s); the ratio is kvfs time over plain time.
func wbTimeRow(measure, key string, kvfs, plain float64, unit string, limit float64) writeRow {
	scale := 1.0
	if unit == "ms" {
		scale = 1000
	}
	r := writeRow{measure: measure, key: key, kvfs: kvfs * scale, plain: plain * scale, unit: unit,
		ratio: kvfs / plain, le: true, limit: limit}
	if limit > 0 {
		r.target = fmt.Sprintf("≤ %g× plain", limit)
	}
	return r
}

// wbRateRow is a row of rates; the ratio is kvfs's rate over plain's.
func wbRateRow(measure, key string, kvfs, plain float64, unit string, limit float64) writeRow {
	r := writeRow{measure: measure, key: key, kvfs: kvfs, plain: plain, unit: unit, ratio: kvfs / plain, limit: limit}
	if limit > 0 {
		r.target = fmt.Sprintf("≥ %g×", limit)
	}
	return r
}

func (t *writeTable) print(w io.Writer, c writeBenchConfig) {
	mode := "full sizes"
	if c.quick {
		mode = "quick sizes (KVFS_BENCH_QUICK=1)"
	}
	if a := benchMountArgs(); len(a) > 0 {
		mode += ", kvfs mounted with " + strings.Join(a, " ")
	}
	if benchFloor() {
		mode += ", the kvfs column measured on go-fuse's loopback file system (KVFS_BENCH_FLOOR=loopback)"
	}
	fmt.Fprintf(w, "\nWrite table (issue 9), %s, %s, snapshot %s; ratio = kvfs/plain of times (≤ targets) or of rates (≥ targets)\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), mode, c.snapshotSize())
	fmt.Fprintln(w, "| measure | kvfs | plain | ratio | target | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, m := range t.order {
		r := t.rows[m]
		plain := r.plainText
		if plain == "" {
			plain = wbNum(r.plain) + " " + r.unit
		}
		kv := wbNum(r.kvfs) + " " + r.unit
		if r.kvfsNote != "" {
			kv += " " + r.kvfsNote
		}
		target := r.target
		if target == "" {
			target = "–"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.3g× | %s | %s |\n", r.measure, kv, plain, r.ratio, target, r.verdict())
	}
	fmt.Fprintln(w)
}

// wbNum formats a measurement to three significant digits, without an
// exponent.
func wbNum(x float64) string {
	if x >= 1000 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// wbPercentile is the nearest-rank p-quantile of xs (sorted in place).
func wbPercentile(xs []float64, p float64) float64 {
	slices.Sort(xs)
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// wbInterleave runs f for the plain directory and for kvfs in each of rounds
// rounds, alternating which goes first, settled before each (wbSettle)
// so that neither pays for the other's writeback.
func wbInterleave(rounds int, f func(round int, kvfs bool)) {
	for r := range rounds {
		wbRound(r, func(kvfs bool) { f(r, kvfs) })
	}
}

// wbRound is one round of wbInterleave: plain first in even rounds, kvfs
// first in odd ones, each after wbSettle.
func wbRound(r int, f func(kvfs bool)) {
	for k := range 2 {
		wbSettle()
		f((r+k)%2 == 1)
	}
}

func wbFields(t testing.TB, out string, n int) []float64 {
	t.Helper()
	fs := strings.Fields(out)
	if len(fs) < n {
		t.Fatalf("client output %q: want %d numbers", out, n)
	}
	xs := make([]float64, len(fs))
	for i, f := range fs {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("client output %q: %v", out, err)
		}
		xs[i] = x
	}
	return xs
}

// benchDurable: the engine's blocks protocol, one durable file at a time
// (tmp, write, fsync, close, rename to blocks/<sha256>), n files of size
// per target in cfg.rounds interleaved rounds; median (and p99) latency.
func benchDurable(b *testing.B, tab *writeTable, cfg writeBenchConfig, size, n int, medianLimit float64, p99 bool) {
	m := newBenchMount(b)
	plain := b.TempDir()
	label := fmt.Sprintf("%d KiB", size>>10)
	if size >= 1<<20 {
		label = fmt.Sprintf("%d MiB", size>>20)
	}
	for i := 0; i < b.N; i++ {
		var lat [2][]float64
		wbInterleave(cfg.rounds, func(r int, kvfs bool) {
			dir, d := plain, 0
			if kvfs {
				dir, d = m.mnt, 1
			}
			out := runClientOK(b, "wb-durable", dir, fmt.Sprint(size), fmt.Sprint(n/cfg.rounds), fmt.Sprint(1000*i+2*r+d))
			lines := strings.Split(strings.TrimSpace(out), "\n")
			for _, x := range wbFields(b, lines[len(lines)-1], n/cfg.rounds) {
				lat[d] = append(lat[d], x/1e9)
			}
		})
		tab.add(b, wbTimeRow(fmt.Sprintf("durable %s file (tmp, write, fsync, close, rename), median", label), "median",
			wbPercentile(lat[1], 0.5), wbPercentile(lat[0], 0.5), "ms", medianLimit))
		if p99 {
			tab.add(b, wbTimeRow(fmt.Sprintf("durable %s file, p99", label), "p99",
				wbPercentile(lat[1], 0.99), wbPercentile(lat[0], 0.99), "ms", 3))
		}
	}
}

// benchBlocksSeries: a 4-snapshot series of one conversation (4 layers ×
// 8 heads × D128, bf16) written in the blocks layout with mlx.Writer, with
// 64 KiB blocks into one namespace and 1 MiB blocks into another; then
// every snapshot read back with verification, and the engine's collect
// scan of every header of the fingerprint directory.
func benchBlocksSeries(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	m := newBenchMount(b)
	roots := [2]string{filepath.Join(b.TempDir(), "fp"), m.path("fp")}
	for _, r := range roots {
		if err := os.Mkdir(r, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	n := cfg.seriesBase
	counts := fmt.Sprintf("%d,%d,%d,%d", n, 2*n, 3*n, 4*n)
	for i := 0; i < b.N; i++ {
		if i > 0 {
			for _, r := range roots {
				sh(b, "rm -rf "+r+"/*")
			}
		}
		for j, s := range []struct {
			bytes          int
			ns, key, label string
		}{{64 << 10, "b64k", "write-64KiB", "64 KiB"}, {1 << 20, "b1m", "write-1MiB", "1 MiB"}} {
			syscall.Sync()
			// A new conversation per series: kvfs deduplicates across
			// namespaces, the engine does not.
			out := runClientOK(b, "wb-blockseries", fmt.Sprint(s.bytes), fmt.Sprint(10*i+j+1), counts,
				filepath.Join(roots[0], s.ns), filepath.Join(roots[1], s.ns))
			x := wbFields(b, out, 2)
			tab.add(b, wbTimeRow(fmt.Sprintf("blocks-layout series write (%s tokens), %s blocks", counts, s.label), s.key,
				x[1], x[0], "s", 1.5))
		}
		var lists [2]string
		for d, r := range roots {
			lists[d] = filepath.Join(r, "b64k") + "," + filepath.Join(r, "b1m")
		}
		syscall.Sync()
		x := wbFields(b, runClientOK(b, "wb-blockverify", "3", lists[0], lists[1]), 2)
		tab.add(b, wbTimeRow("blocks-layout read back with verification (both series, best of 3)", "verify", x[1], x[0], "s", 1.3))
		x = wbFields(b, runClientOK(b, "wb-collect", fmt.Sprint(cfg.collectRounds), roots[0], roots[1]), 6)
		if x[2] != x[4] || x[3] != 0 || x[5] != 0 {
			b.Fatalf("collect scans disagree: plain %v live %v dead, kvfs %v live %v dead", x[2], x[3], x[4], x[5])
		}
		r := wbTimeRow(fmt.Sprintf("collect-style scan of every header (%d blocks live), median of %d", int(x[2]), cfg.collectRounds),
			"collect", x[1], x[0], "ms", 1.3)
		tab.add(b, r)
	}
}

// benchWholeSnapshot: a new Llama-3-8B-shaped snapshot written in the
// whole layout by mlx.Writer (tmp, write, fsync, close, rename, directory
// fsync), best of cfg.snapRounds per target.
func benchWholeSnapshot(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	m := newBenchMount(b)
	plain := b.TempDir()
	for i := 0; i < b.N; i++ {
		x := wbFields(b, runClientOK(b, "wb-whole", fmt.Sprint(cfg.snapshotTokens()), fmt.Sprint(cfg.snapRounds),
			fmt.Sprint(100*i+1), plain, m.mnt), 3)
		r := wbTimeRow(fmt.Sprintf("whole-layout snapshot write + fsync + rename, %s", cfg.snapshotSize()), "whole",
			x[1], x[0], "s", 1.3)
		r.kvfsNote = fmt.Sprintf("(%.2f GB/s)", x[2]/x[1]/1e9)
		tab.add(b, r)
	}
}

// wbTimed runs a shell command line and returns its seconds.
func wbTimed(t testing.TB, script string) float64 {
	t.Helper()
	t0 := time.Now()
	sh(t, script)
	return time.Since(t0).Seconds()
}

// benchCp: cp of a new snapshot into the mount (durable when cp returns)
// vs cp to the plain directory followed by sync of the copy (both
// durable), and vs the plain cp alone; best of cfg.snapRounds each.
func benchCp(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	m := newBenchMount(b)
	plain := b.TempDir()
	for i := 0; i < b.N; i++ {
		best := [3]float64{math.Inf(1), math.Inf(1), math.Inf(1)} // cp, cp+sync, kvfs cp
		for r := range cfg.snapRounds {
			src := filepath.Join(plain, "src.mlxkv")
			if err := snapgen.Llama3_8B.WriteFile(src, snapgen.Tokens(cfg.snapshotTokens(), uint64(200+100*i+r))); err != nil {
				b.Fatal(err)
			}
			local, mounted := filepath.Join(plain, "copy.mlxkv"), m.path(fmt.Sprintf("copy-%d.mlxkv", r))
			wbRound(r, func(kvfs bool) {
				if kvfs {
					script := fmt.Sprintf("cp %s %s", src, mounted)
					if benchFloor() {
						// The loopback's close does not sync: made
						// durable as kvfs's cp is.
						script += " && sync " + mounted
					}
					best[2] = min(best[2], wbTimed(b, script))
					return
				}
				t := wbTimed(b, fmt.Sprintf("cp %s %s", src, local))
				best[0] = min(best[0], t)
				best[1] = min(best[1], t+wbTimed(b, "sync "+local))
			})
			for _, f := range []string{src, local, mounted} {
				if err := os.Remove(f); err != nil {
					b.Fatal(err)
				}
			}
		}
		size := cfg.snapshotSize()
		gb := float64(cfg.snapshotTokens()) * float64(snapgen.Llama3_8B.BytesPerToken()) / 1e9
		tab.add(b, wbRateRow(fmt.Sprintf("cp of a new %s snapshot, vs cp + sync to disk", size), "cp-vs-cp+sync",
			gb/best[2], gb/best[1], "GB/s", 0.8))
		tab.add(b, wbRateRow(fmt.Sprintf("cp of a new %s snapshot, vs cp to disk (not durable)", size), "cp-vs-cp",
			gb/best[2], gb/best[0], "GB/s", 0))
	}
}

// wbRunTogether starts one client per argument list, waits until each has
// printed "ready", releases them at once, and returns the span from the
// earliest start to the latest end that they print first on their
// output (Unix ns), and the rest of each output.
func wbRunTogether(t testing.TB, name string, argv [][]string) (wall float64, outs []string) {
	t.Helper()
	type proc struct {
		cmd    interface{ Wait() error }
		in     io.WriteCloser
		out    *bufio.Reader
		stderr bytes.Buffer
	}
	var ps []*proc
	var failed []string
	for _, a := range argv {
		cmd := client(name, a...)
		p := &proc{cmd: cmd}
		cmd.Stderr = &p.stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p.in, p.out = in, bufio.NewReader(out)
		ps = append(ps, p)
	}
	for _, p := range ps {
		if line, _ := p.out.ReadString('\n'); line != "ready\n" {
			failed = append(failed, fmt.Sprintf("not ready: %q", line))
		}
	}
	for _, p := range ps {
		p.in.Write([]byte("go\n"))
		p.in.Close()
	}
	first, last := math.Inf(1), math.Inf(-1)
	for i, p := range ps {
		rest, _ := io.ReadAll(p.out)
		if err := p.cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("client %s %v: %v\n%s", name, argv[i], err, p.stderr.String()))
			continue
		}
		fs := strings.Fields(string(rest))
		if len(fs) < 2 {
			failed = append(failed, fmt.Sprintf("client %s %v: output %q", name, argv[i], rest))
			continue
		}
		s, _ := strconv.ParseFloat(fs[0], 64)
		e, _ := strconv.ParseFloat(fs[1], 64)
		first, last = min(first, s), max(last, e)
		outs = append(outs, strings.Join(fs[2:], " "))
	}
	if len(failed) > 0 {
		t.Fatal(strings.Join(failed, "\n"))
	}
	return (last - first) / 1e9, outs
}

// benchConcurrentDurable: 8 writer processes at once, each writing
// cfg.writerFiles durable 64 KiB files into the same blocks directory;
// files per second over the span of all, best of 2 rounds per target.
func benchConcurrentDurable(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	m := newBenchMount(b)
	plain := b.TempDir()
	for i := 0; i < b.N; i++ {
		var rate [2]float64
		wbInterleave(2, func(r int, kvfs bool) {
			dir, d := plain, 0
			if kvfs {
				dir, d = m.mnt, 1
			}
			var argv [][]string
			for w := range 8 {
				argv = append(argv, []string{dir, fmt.Sprint(64 << 10), fmt.Sprint(cfg.writerFiles),
					fmt.Sprint(10000 + 1000*i + 100*r + 10*w + d), "wait"})
			}
			wall, _ := wbRunTogether(b, "wb-durable", argv)
			rate[d] = max(rate[d], float64(8*cfg.writerFiles)/wall)
		})
		tab.add(b, wbRateRow("8 concurrent writers of durable 64 KiB files", "writers8", rate[1], rate[0], "files/s", 0.7))
	}
}

// writeRandomFile writes size random bytes drawn from seed to path.
func wbWriteRandomFile(t testing.TB, path string, size int64, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		wbFill(buf, seed, uint64(off))
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// benchFsyncWriters: 4 writer processes at once, each opening its own
// existing file of cfg.fsyncFileMiB for writing and making cfg.fsyncWrites
// writes of 4 KiB to 1 MiB at random offsets, fsyncing every 64; bytes
// written per second over the span of all (open to close), best of 2
// rounds per target.
func benchFsyncWriters(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	m := newBenchMount(b)
	plain := b.TempDir()
	size := int64(cfg.fsyncFileMiB) << 20
	for w := range 4 {
		p := filepath.Join(plain, fmt.Sprintf("f%d", w))
		wbWriteRandomFile(b, p, size, uint64(500+w))
		sh(b, fmt.Sprintf("cp %s %s", p, m.path(fmt.Sprintf("f%d", w))))
	}
	for i := 0; i < b.N; i++ {
		var rate [2]float64
		wbInterleave(2, func(r int, kvfs bool) {
			dir, d := plain, 0
			if kvfs {
				dir, d = m.mnt, 1
			}
			var argv [][]string
			for w := range 4 {
				argv = append(argv, []string{filepath.Join(dir, fmt.Sprintf("f%d", w)), fmt.Sprint(cfg.fsyncWrites),
					fmt.Sprint(20000 + 1000*i + 100*r + 10*w + d)})
			}
			wall, outs := wbRunTogether(b, "wb-fsyncwriter", argv)
			var total float64
			for _, o := range outs {
				total += wbFields(b, o, 1)[0]
			}
			rate[d] = max(rate[d], total/wall/1e6)
		})
		tab.add(b, wbRateRow(fmt.Sprintf("4 writers, each fsyncing every 64 writes of 4 KiB–1 MiB into a %d MiB file (%d writes)",
			cfg.fsyncFileMiB, cfg.fsyncWrites), "fsync4", rate[1], rate[0], "MB/s", 0.5))
	}
}

// benchMetadata: create, stat, rename, chmod and unlink of cfg.metaFiles
// empty files, each phase timed on its own in both directories.
func benchMetadata(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	m := newBenchMount(b)
	dirs := [2]string{filepath.Join(b.TempDir(), "meta"), m.path("meta")}
	for i := 0; i < b.N; i++ {
		for _, d := range dirs {
			os.RemoveAll(d)
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		out := strings.Split(strings.TrimSpace(runClientOK(b, "wb-meta", fmt.Sprint(cfg.metaFiles), dirs[0], dirs[1])), "\n")
		if len(out) != 2 {
			b.Fatalf("wb-meta output %q", out)
		}
		p, k := wbFields(b, out[0], 5), wbFields(b, out[1], 5)
		n := float64(cfg.metaFiles)
		for j, op := range []string{"create", "stat", "rename", "chmod", "unlink"} {
			tab.add(b, wbRateRow(fmt.Sprintf("metadata: %s of %d empty files", op, cfg.metaFiles), op,
				n/k[j], n/p[j], "ops/s", 0.3))
		}
	}
}

// benchPacks: cfg.smallFiles files of 4 KiB to 64 KiB written into a fresh
// mount (each committed at close); the number of pack files afterwards
// against the bound, stored bytes / 16 MiB + 8.
func benchPacks(b *testing.B, tab *writeTable, cfg writeBenchConfig) {
	for i := 0; i < b.N; i++ {
		m := newMount(b, benchMountArgs()...)
		x := wbFields(b, runClientOK(b, "wb-smallfiles", m.mnt, fmt.Sprint(cfg.smallFiles), fmt.Sprint(30000+i)), 2)
		// Count once the daemon is gone: every release has been handled.
		kvfs(b, "unmount", m.mnt)
		waitUnmounted(b, m)
		packs, err := filepath.Glob(filepath.Join(m.store, "packs", "*.pack"))
		if err != nil {
			b.Fatal(err)
		}
		var onDisk int64
		for _, p := range packs {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err == nil {
				onDisk += st.Blocks * 512
			}
		}
		bound := math.Floor(x[0]/(16<<20)) + 8
		b.ReportMetric(x[0]/1e6, "packs-stored-MB")
		b.ReportMetric(float64(onDisk)/1e6, "packs-on-disk-MB")
		tab.add(b, writeRow{measure: fmt.Sprintf("packs after %d small files (4–64 KiB, %.0f MB stored)", cfg.smallFiles, x[0]/1e6),
			key: "packs", kvfs: float64(len(packs)), unit: "packs", plainText: fmt.Sprintf("bound %.0f", bound),
			ratio: float64(len(packs)) / bound, le: true, limit: 1, target: "≤ stored / 16 MiB + 8",
			kvfsNote: fmt.Sprintf("(%.0f MB on disk)", float64(onDisk)/1e6)})
	}
}
