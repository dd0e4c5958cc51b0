//go:build linux

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPoolEnvKeepsLocalStore: with $KVFS_POOL set (as scripts/services
// start leaves it), kvfs mount of a local store mounts that store, says
// so, and writes no pool files into it; --pool given with a local store is
// refused with the reason, before anything is mounted.
func TestPoolEnvKeepsLocalStore(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	st, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "init", st)
	src := filepath.Join(dir, "f")
	want := randFile(t, src, 100_000, 3)
	kvfs(t, "put", st, src, "f")
	env := append(os.Environ(), "KVFS_POOL=s3://nobucket/pool", "KVFS_ENDPOINT=http://127.0.0.1:1", "KVFS_ETCD=127.0.0.1:1")

	cmd := exec.Command(kvfsBin, "mount", "--pool", "s3://nobucket/pool", st, mnt)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "is a local store") {
		t.Fatalf("mount --pool of a local store: %v, exit %d:\n%s", err, cmd.ProcessState.ExitCode(), out)
	}
	if isMounted(mnt) {
		t.Fatal("mounted anyway")
	}

	cmd = exec.Command(kvfsBin, "mount", st, mnt)
	cmd.Env = env
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount with $KVFS_POOL set: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if isMounted(mnt) {
			syscall.Unmount(mnt, 0)
		}
	})
	if !strings.Contains(string(out), "is a local store: mounting it") {
		t.Errorf("mount did not say it ignored $KVFS_POOL:\n%s", out)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "f"))
	if err != nil || string(got) != string(want) {
		t.Fatalf("the local store's file through the mount: %v (%d bytes)", err, len(got))
	}
	for _, p := range []string{"pool.json", "cache"} {
		if _, err := os.Stat(filepath.Join(st, p)); err == nil {
			t.Errorf("the mount wrote %s into the local store", p)
		}
	}
	kvfs(t, "unmount", mnt)
}
