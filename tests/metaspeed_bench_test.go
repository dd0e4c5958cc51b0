package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkMetaspeed runs the metadata row of BenchmarkWriteTable (client
// wb-meta: create, stat, rename, chmod, unlink of empty files, each phase
// timed in a plain directory and in the mount in the same run) on its own,
// for profiling the daemon and for measuring what the index's syncs cost:
//
//	KVFS_META_FILES  files per phase (default 2000)
//	KVFS_META_ARGS   extra kvfs mount arguments, space-separated
//	                 (e.g. "--cpu-profile /tmp/meta.prof")
//	KVFS_META_STORE  parent directory of the store (default a temporary
//	                 directory on the test's disk); a tmpfs such as
//	                 /dev/shm makes the index's fdatasyncs free, which
//	                 shows the ceiling of rename, chmod and unlink once
//	                 their commits no longer sync (the journal).
//
// It reports each phase's kvfs/plain ratio of operations per second.
func BenchmarkMetaspeed(b *testing.B) {
	n := 2000
	if v := os.Getenv("KVFS_META_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("KVFS_META_FILES=%q: want a positive count", v)
		}
	}
	m := newMetaBenchMount(b, os.Getenv("KVFS_META_STORE"), strings.Fields(os.Getenv("KVFS_META_ARGS"))...)
	dirs := [2]string{filepath.Join(b.TempDir(), "meta"), m.path("meta")}
	for i := 0; i < b.N; i++ {
		for _, d := range dirs {
			os.RemoveAll(d)
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		out := strings.Split(strings.TrimSpace(runClientOK(b, "wb-meta", fmt.Sprint(n), dirs[0], dirs[1])), "\n")
		if len(out) != 2 {
			b.Fatalf("wb-meta output %q", out)
		}
		p, k := wbFields(b, out[0], 5), wbFields(b, out[1], 5)
		for j, op := range []string{"create", "stat", "rename", "chmod", "unlink"} {
			b.ReportMetric(p[j]/k[j], op+"-ratio")
			fmt.Printf("%-7s kvfs %8.0f ops/s  plain %8.0f ops/s  ratio %.3f\n", op, float64(n)/k[j], float64(n)/p[j], p[j]/k[j])
		}
	}
}

// newMetaBenchMount is newMount with the store below parent (a temporary
// directory when "").
func newMetaBenchMount(b *testing.B, parent string, args ...string) *mount {
	if parent == "" {
		return newMount(b, args...)
	}
	requireRoot(b)
	dir, err := os.MkdirTemp(parent, "kvfs-meta-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	m := &mount{store: filepath.Join(dir, "store"), mnt: filepath.Join(b.TempDir(), "mnt")}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		b.Fatal(err)
	}
	kvfs(b, "init", m.store)
	m.start(b, args...)
	b.Cleanup(func() {
		kvfs(b, "unmount", m.mnt)
		waitUnmounted(b, m)
		m.check(b)
	})
	return m
}
