//go:build linux

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountDefaultPaths: kvfs init and kvfs mount given no paths (as the
// launchd agent runs it) make and mount the default store at the default
// mount point, here under $XDG_DATA_HOME; a file written through the
// mount by another process is in the store, and kvfs unmount ends the
// daemon.
func TestMountDefaultPaths(t *testing.T) {
	requireRoot(t)
	xdg := t.TempDir()
	m := &mount{store: filepath.Join(xdg, "kvfs", "store"), mnt: filepath.Join(xdg, "kvfs", "mnt")}
	env := append(os.Environ(), "XDG_DATA_HOME="+xdg, "KVFS_STORE=", "KVFS_MOUNT=")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(kvfsBin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kvfs %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("init"); !strings.Contains(out, "initialised store "+m.store) {
		t.Fatalf("kvfs init: %s", out)
	}
	run("mount")
	t.Cleanup(func() {
		if isMounted(m.mnt) {
			exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		}
	})
	if !isMounted(m.mnt) {
		t.Fatalf("kvfs mount returned but %s is not mounted: %v", m.mnt, kvfsMounts())
	}
	sh(t, "echo hello > "+m.path("f"))
	if out := kvfs(t, "ls", m.store); !strings.Contains(out, "f") {
		t.Errorf("kvfs ls %s: %q", m.store, out)
	}
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	m.check(t)
}
