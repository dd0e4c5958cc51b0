//go:build linux

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkHeaderScan measures issue 11's "reading the headers of 1,000
// snapshots through the mount: ≤ 2× reading them from a plain directory":
// the engine's start-up scan (FORMAT.md §5.2: list the namespace directory,
// read every .mlxkv header as readKvHeader does, stat each) of a kvfs
// namespace directory against the same snapshots in a plain directory on
// the same disk, in the same run. The snapshots (hs-write,
// bench_headers_clients_test.go) have a 32-layer model's header and a few
// hundred tokens each, in conversations that share prefixes. Each scan is
// a client process of its own; kvfs and plain alternate round by round,
// and which goes first alternates too.
//
// Cold rounds drop the kernel's caches (sync, then echo 3 >
// /proc/sys/vm/drop_caches) before every scan, on both sides: the plain
// files' pages and inodes, the kvfs mount's pages, dentries and inodes,
// and the store's packs leave memory. The daemon keeps its own memory and
// the pages of its index, which it maps (drop_caches leaves mapped
// pages). Cold-remounted rounds also unmount and mount kvfs
// again before its scan, so that the daemon starts afresh and its index
// is read from the disk too. Warm rounds follow one untimed scan of each
// side. Reported: median seconds per side and the ratio kvfs/plain of the
// medians, of the whole scan and of its system calls alone (the rest,
// checking and parsing the headers, is the same work on both sides).
//
//	go test ./tests -run '^$' -bench BenchmarkHeaderScan -benchtime 1x
//
// KVFS_BENCH_QUICK=1 scans 200 snapshots in 3 rounds; KVFS_BENCH_MOUNT_ARGS
// (split at spaces) adds arguments to the kvfs mount. Results in
// docs/BENCHMARKS.md.
func BenchmarkHeaderScan(b *testing.B) {
	requireRoot(b)
	n, rounds := 1000, 7
	if os.Getenv("KVFS_BENCH_QUICK") == "1" {
		n, rounds = 200, 3
	}
	m := newMount(b, benchMountArgs()...)
	dirs := [2]string{filepath.Join(b.TempDir(), "fp", "base"), m.path("fp/base")} // plain, kvfs
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	runClientOK(b, "hs-write", fmt.Sprint(n), "1", dirs[0], dirs[1])
	wbSettle()
	var found [2]string // each side's files, tokens and digest
	// scan runs one scan of side d and returns its seconds: all, and in
	// system calls.
	scan := func(d int) [2]float64 {
		fs := strings.Fields(runClientOK(b, "hs-scan", dirs[d]))
		if len(fs) != 5 {
			b.Fatalf("hs-scan %s: output %q", dirs[d], fs)
		}
		if fs[1] != fmt.Sprint(n) {
			b.Fatalf("hs-scan %s: %s headers, want %d", dirs[d], fs[1], n)
		}
		found[d] = strings.Join(fs[1:4], " ")
		var sec [2]float64
		for k, f := range []string{fs[0], fs[4]} {
			var err error
			if sec[k], err = strconv.ParseFloat(f, 64); err != nil {
				b.Fatalf("hs-scan %s: %v", dirs[d], err)
			}
		}
		return sec
	}
	for i := 0; i < b.N; i++ {
		var cold, remounted, warm [2][][2]float64
		for r := range rounds {
			for k := range 2 {
				d := (r + k) % 2
				hsDropCaches(b)
				cold[d] = append(cold[d], scan(d))
			}
		}
		for r := range rounds {
			for k := range 2 {
				d := (r + k) % 2
				if d == 1 {
					remount(b, m, benchMountArgs()...)
				}
				hsDropCaches(b)
				remounted[d] = append(remounted[d], scan(d))
			}
		}
		scan(0)
		scan(1)
		for r := range rounds {
			for k := range 2 {
				d := (r + k) % 2
				warm[d] = append(warm[d], scan(d))
			}
		}
		if found[0] != found[1] {
			b.Fatalf("the scans disagree: plain found %s, kvfs %s (files, tokens, digest)", found[0], found[1])
		}
		for _, c := range []struct {
			name string
			t    [2][][2]float64
		}{{"cold", cold}, {"cold-remounted", remounted}, {"warm", warm}} {
			med := func(d, k int) float64 {
				var xs []float64
				for _, x := range c.t[d] {
					xs = append(xs, x[k])
				}
				return wbPercentile(xs, 0.5)
			}
			plain, kv := med(0, 0), med(1, 0)
			plainIO, kvIO := med(0, 1), med(1, 1)
			b.ReportMetric(kv*1000, c.name+"-kvfs-ms")
			b.ReportMetric(plain*1000, c.name+"-plain-ms")
			b.ReportMetric(kv/plain, c.name+"-ratio")
			b.ReportMetric(kvIO/plainIO, c.name+"-syscalls-ratio")
			verdict := "pass"
			if kv/plain > 2 {
				verdict = "FAIL"
			}
			fmt.Printf("header scan of %d snapshots, %s, median of %d: kvfs %.1f ms, plain %.1f ms, ratio %.2f× (≤ 2×: %s); in system calls kvfs %.1f ms, plain %.1f ms, ratio %.2f× [%s UTC]\n",
				n, c.name, rounds, kv*1000, plain*1000, kv/plain, verdict, kvIO*1000, plainIO*1000, kvIO/plainIO,
				time.Now().UTC().Format("2006-01-02 15:04"))
		}
	}
}

// hsDropCaches writes back every dirty page and drops the kernel's page,
// dentry and inode caches, so that the next scan reads from the disk.
func hsDropCaches(b *testing.B) {
	b.Helper()
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		b.Fatalf("drop caches: %v", err)
	}
}
