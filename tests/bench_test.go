package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
)

// The mount benchmarks compare kvfs with baselines measured in the same
// run (docs/BENCHMARKS.md): the plain file on the local disk, and an
// in-memory go-fuse file system serving the same bytes (the machine's FUSE
// ceiling). Every reader and writer is a separate process.

func secondsOf(t testing.TB, out string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(strings.Fields(out)[0], 64)
	if err != nil {
		t.Fatalf("client output %q", out)
	}
	return f
}

func dropCaches(t testing.TB) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		t.Fatalf("drop caches: %v", err)
	}
}

func readSeq(t testing.TB, path string) float64 {
	return secondsOf(t, runClientOK(t, "readseq", path))
}

func BenchmarkMount(b *testing.B) {
	requireRoot(b)
	dir := b.TempDir()
	snap := filepath.Join(dir, "llama.mlxkv")
	if err := snapgen.Llama3_8B.WriteFile(snap, snapgen.Tokens(8192, 1)); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(snap)
	gb := float64(fi.Size()) / 1e9
	m := newMount(b)
	for b.Loop() {
		// cp into the mount (commit at close included) vs cp to the disk.
		local := filepath.Join(dir, "copy.mlxkv")
		os.Remove(local)
		sh(b, "sync")
		t0 := time.Now()
		sh(b, fmt.Sprintf("cp %s %s", snap, local))
		cpLocal := time.Since(t0).Seconds()
		os.Remove(m.path("a.mlxkv"))
		sh(b, "sync")
		t0 = time.Now()
		sh(b, fmt.Sprintf("cp %s %s", snap, m.path("a.mlxkv")))
		cpKVFS := time.Since(t0).Seconds()
		os.Remove(local)
		b.ReportMetric(cpLocal/cpKVFS, "cp-in/cp-local")

		// First read: the mount's kernel cache empty (remount), packs in
		// the page cache, vs the in-memory FUSE file system.
		kvfs(b, "unmount", m.mnt)
		waitUnmounted(b, m)
		sh(b, fmt.Sprintf("cat %s/packs/* > /dev/null", m.store))
		m.start(b)
		first := readSeq(b, m.path("a.mlxkv"))
		memMnt := filepath.Join(dir, "memfs")
		os.Mkdir(memMnt, 0o755)
		mem := client("memfs", snap, memMnt)
		out, _ := mem.StdoutPipe()
		if err := mem.Start(); err != nil {
			b.Fatal(err)
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			b.Fatalf("memfs: %q", line)
		}
		ceiling := readSeq(b, filepath.Join(memMnt, "file"))
		mem.Process.Signal(syscall.SIGTERM)
		mem.Wait()
		b.ReportMetric(ceiling/first, "first-read/fuse-ceiling")
		b.ReportMetric(gb/first, "first-read-GB/s")
		b.ReportMetric(gb/ceiling, "fuse-ceiling-GB/s")

		// Second read: kernel page cache kept, vs the plain file (warm).
		readSeq(b, snap)
		plainWarm := readSeq(b, snap)
		second := readSeq(b, m.path("a.mlxkv"))
		b.ReportMetric(plainWarm/second, "second-read/plain")

		// mmap touching every page, mount freshly remounted (packs warm)
		// vs the plain file (warm).
		kvfs(b, "unmount", m.mnt)
		waitUnmounted(b, m)
		sh(b, fmt.Sprintf("cat %s/packs/* > /dev/null", m.store))
		m.start(b)
		mmapKVFS := secondsOf(b, runClientOK(b, "mmaptouch", m.path("a.mlxkv")))
		mmapPlain := secondsOf(b, runClientOK(b, "mmaptouch", snap))
		b.ReportMetric(mmapPlain/mmapKVFS, "mmap/plain-mmap")

		// Cold: caches dropped before each read.
		dropCaches(b)
		coldPlain := readSeq(b, snap)
		kvfs(b, "unmount", m.mnt)
		waitUnmounted(b, m)
		m.start(b)
		dropCaches(b)
		coldKVFS := readSeq(b, m.path("a.mlxkv"))
		b.ReportMetric(coldPlain/coldKVFS, "cold-read/plain")

		// Daemon memory while four readers stream the snapshot.
		kvfs(b, "unmount", m.mnt)
		waitUnmounted(b, m)
		m.start(b)
		pid := daemonPID(b, m)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); readSeq(b, m.path("a.mlxkv")) }()
		}
		wg.Wait()
		b.ReportMetric(float64(peakRSS(b, pid))/(1<<20), "daemon-peak-RSS-MiB")
	}
}

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

var _ = exec.Command
