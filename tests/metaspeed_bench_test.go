//go:build linux

package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	clients["ms-miss"] = msMissClient
	clients["ms-blocks"] = msBlocksClient
}

// msBlocksClient, client ms-blocks, N DIR1 DIR2: the engine's blocks
// protocol (FORMAT.md §4.3) for N small blocks in DIR/blocks, step by
// step, each step timed over all blocks in both directories in turn: the
// existence check of blocks/<sha256> (missing), the tmp file created,
// written and closed (no fsync: the metadata, not the sync), the rename
// to blocks/<sha256>, and an open, read and close of the block. Prints,
// for each directory, the seconds of the four steps.
func msBlocksClient(args []string) error {
	n := wbAtoi(args[0])
	content := func(i int) []byte { return fmt.Appendf(nil, "block %d of ms-blocks", i) }
	name := func(dir string, i int) string {
		sum := sha256.Sum256(content(i))
		return filepath.Join(dir, "blocks", hex.EncodeToString(sum[:]))
	}
	steps := []func(dir string, i int) error{
		func(dir string, i int) error {
			var st syscall.Stat_t
			if err := syscall.Lstat(name(dir, i), &st); err != syscall.ENOENT {
				return fmt.Errorf("stat %s: %v, want ENOENT", name(dir, i), err)
			}
			return nil
		},
		func(dir string, i int) error {
			return os.WriteFile(name(dir, i)+".tmp", content(i), 0o600)
		},
		func(dir string, i int) error { return os.Rename(name(dir, i)+".tmp", name(dir, i)) },
		func(dir string, i int) error {
			b, err := os.ReadFile(name(dir, i))
			if err == nil && !bytes.Equal(b, content(i)) {
				err = fmt.Errorf("read %s: wrong content", name(dir, i))
			}
			return err
		},
	}
	for _, dir := range args[1:3] {
		if err := os.MkdirAll(filepath.Join(dir, "blocks"), 0o755); err != nil {
			return err
		}
	}
	var spent [2][]float64
	for s, step := range steps {
		for k := range 2 {
			d := (s + k) % 2
			wbSettle()
			t0 := time.Now()
			for i := range n {
				if err := step(args[1+d], i); err != nil {
					return err
				}
			}
			spent[d] = append(spent[d], time.Since(t0).Seconds())
		}
	}
	for _, s := range spent {
		fmt.Println(strings.Trim(fmt.Sprint(s), "[]"))
	}
	return nil
}

// msMissClient, client ms-miss, N DIR1 DIR2: in each directory, stat N
// missing names of 64 characters (which the mount never keeps as negative
// entries, so each is a FUSE lookup answered from the index: the floor of
// any metadata operation through FUSE), then N missing short names twice,
// timing the second pass (a negative entry kept by the kernel, or a
// lookup each). Prints, for each directory, the seconds of both.
func msMissClient(args []string) error {
	n := wbAtoi(args[0])
	stat := func(p string) error {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != syscall.ENOENT {
			return fmt.Errorf("stat %s: %v, want ENOENT", p, err)
		}
		return nil
	}
	for _, dir := range args[1:3] {
		t0 := time.Now()
		for i := range n {
			if err := stat(filepath.Join(dir, fmt.Sprintf("%064d", i))); err != nil {
				return err
			}
		}
		hex := time.Since(t0).Seconds()
		var again float64
		for pass := range 2 {
			t0 = time.Now()
			for i := range n {
				if err := stat(filepath.Join(dir, fmt.Sprintf("m%05d", i))); err != nil {
					return err
				}
			}
			if pass == 1 {
				again = time.Since(t0).Seconds()
			}
		}
		fmt.Println(hex, again)
	}
	return nil
}

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
// It reports each phase's kvfs/plain ratio of operations per second, and
// those of stats of missing names (client ms-miss): 64-character ones, one
// uncached lookup each (the floor of a metadata operation through FUSE),
// and short ones stat'ed a second time (kept as negative entries); and
// those of the steps of the engine's blocks protocol (client ms-blocks).
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
		out = strings.Split(strings.TrimSpace(runClientOK(b, "ms-miss", fmt.Sprint(n), dirs[0], dirs[1])), "\n")
		if len(out) != 2 {
			b.Fatalf("ms-miss output %q", out)
		}
		p, k = wbFields(b, out[0], 2), wbFields(b, out[1], 2)
		for j, op := range []string{"miss64", "missagain"} {
			b.ReportMetric(p[j]/k[j], op+"-ratio")
			fmt.Printf("%-9s kvfs %8.0f ops/s  plain %8.0f ops/s  ratio %.3f\n", op, float64(n)/k[j], float64(n)/p[j], p[j]/k[j])
		}
		out = strings.Split(strings.TrimSpace(runClientOK(b, "ms-blocks", fmt.Sprint(n), dirs[0], dirs[1])), "\n")
		if len(out) != 2 {
			b.Fatalf("ms-blocks output %q", out)
		}
		p, k = wbFields(b, out[0], 4), wbFields(b, out[1], 4)
		for j, op := range []string{"blk-stat", "blk-tmp", "blk-rename", "blk-read"} {
			b.ReportMetric(p[j]/k[j], op+"-ratio")
			fmt.Printf("%-10s kvfs %8.0f ops/s  plain %8.0f ops/s  ratio %.3f\n", op, float64(n)/k[j], float64(n)/p[j], p[j]/k[j])
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
