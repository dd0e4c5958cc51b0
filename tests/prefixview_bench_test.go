//go:build linux

package tests

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// daemonReadBytes is what the daemon has read so far with read system
// calls (rchar of /proc/PID/io): its reads of the store's packs, and the
// FUSE requests it receives (small for reads and lookups).
func daemonReadBytes(b *testing.B, pid int) int64 {
	b.Helper()
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(io), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no rchar in /proc/%d/io", pid)
	return 0
}

// BenchmarkPrefixView reads /.kvfs/prefix views of a 12,000-token
// snapshot (llama4: 16 KiB per token), whole and blocks layout, at
// several N, the last the full snapshot, and reports what the daemon read
// from the store: resolve-B at the first lookup (the tensor hashes:
// reading the N tokens' bytes once), read-B for reading the whole view,
// and view-B its size. Both are proportional to N. Run with -benchtime=1x:
// a later iteration finds the view made and its pages in the kernel's
// cache, and reads nothing.
//
//	go test ./tests -run '^$' -bench BenchmarkPrefixView -benchtime=1x
func BenchmarkPrefixView(b *testing.B) {
	m := newMount(b)
	const total = 12000
	for _, layout := range []string{"whole", "blocks"} {
		if err := os.MkdirAll(m.path("d-"+layout), 0o755); err != nil {
			b.Fatal(err)
		}
		runClientOK(b, "prefixwrite", "llama4", layout, m.path("d-"+layout+"/s.mlxkv"), fmt.Sprint(total), "1")
	}
	pid := daemonPID(b, m)
	buf := make([]byte, 1<<20)
	for _, layout := range []string{"whole", "blocks"} {
		for _, n := range []int{1024, 4096, 8960, total} {
			b.Run(fmt.Sprintf("%s/N=%d", layout, n), func(b *testing.B) {
				view := prefixViewPath(m, "d-"+layout+"/s.mlxkv", n)
				var resolve, read, size int64
				for i := 0; i < b.N; i++ {
					r0 := daemonReadBytes(b, pid)
					fi, err := os.Stat(view)
					if err != nil {
						b.Fatal(err)
					}
					r1 := daemonReadBytes(b, pid)
					f, err := os.Open(view)
					if err != nil {
						b.Fatal(err)
					}
					got, err := io.CopyBuffer(io.Discard, f, buf)
					f.Close()
					if err != nil || got != fi.Size() {
						b.Fatalf("read %s: %d of %d bytes: %v", view, got, fi.Size(), err)
					}
					r2 := daemonReadBytes(b, pid)
					resolve += r1 - r0
					read += r2 - r1
					size += fi.Size()
				}
				b.ReportMetric(float64(size)/float64(b.N), "view-B")
				b.ReportMetric(float64(resolve)/float64(b.N), "resolve-B")
				b.ReportMetric(float64(read)/float64(b.N), "read-B")
			})
		}
	}
}
