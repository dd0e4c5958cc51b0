//go:build linux

package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
)

// TestOpenAfterCommitDropsPages: an open of a file's unchanged version
// keeps the kernel's pages (no read reaches the daemon), and the first
// open after a commit drops them (its reads do), for a rewrite of the same
// size in place. On Linux the commit's notification and the open's missing
// KEEP_CACHE drop them; with --simulate-darwin, where nothing is notified
// and every open keeps pages as macFUSE does, only the open's purge does
// (fs/opencache.go), so this is the darwin decision reaching a real
// kernel. Each read is a separate process.
func TestOpenAfterCommitDropsPages(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	randFile(t, a, 1<<20, 1)
	randFile(t, b, 1<<20, 2)
	f := m.path("f")
	sh(t, fmt.Sprintf("cp %s %s", a, f))
	reads := func(want string) int64 {
		t.Helper()
		n := metric(t, addr, "kvfs_read_requests_total")
		sh(t, fmt.Sprintf("cmp %s %s", want, f))
		return metric(t, addr, "kvfs_read_requests_total") - n
	}
	reads(a) // the first open after the copy's commit
	if n := reads(a); n != 0 {
		t.Errorf("an open of the unchanged version sent %d reads: the kernel dropped its pages", n)
	}
	// The same size, in place: the kernel's pages are the writes', but
	// the open after the commit must not trust them.
	sh(t, fmt.Sprintf("dd if=%s of=%s bs=64k conv=notrunc status=none", b, f))
	if n := reads(b); n == 0 {
		t.Error("the first open after a commit sent no read: the kernel kept the pages of the version before it")
	}
	if n := reads(b); n != 0 {
		t.Errorf("the second open after the commit sent %d reads: the kernel dropped the pages again", n)
	}
	if fi, err := os.Stat(f); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("stat: %v", err)
	}
}

// TestFailedCommitDropsPages: a rewrite whose commit fails (ENOSPC at
// fsync and close, on a full disk) leaves the file as it was, and a later
// reader, in another process, reads that content, not the writes that the
// kernel still had in its page cache. On macOS (--simulate-darwin) the
// next open must purge them as it does after a commit.
func TestFailedCommitDropsPages(t *testing.T) {
	m, disk, _ := newSmallFSMount(t, "tmpfs", 24<<20)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	randFile(t, a, 512<<10, 1) // small: spooled in memory, so the writes succeed
	randFile(t, b, 512<<10, 2)
	f := m.path("f")
	sh(t, fmt.Sprintf("cp %s %s && cmp %s %s", a, f, a, f))
	testutil.Fill(t, filepath.Join(disk, "filler"))
	out, err := exec.Command("sh", "-c", fmt.Sprintf("dd if=%s of=%s bs=64k conv=notrunc,fsync status=none", b, f)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "No space left") {
		t.Fatalf("rewrite on a full disk: %v %s; want ENOSPC", err, out)
	}
	sh(t, fmt.Sprintf("cmp %s %s", a, f))
}
