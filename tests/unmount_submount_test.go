//go:build linux

package tests

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestUnmountBusySubmount: a mount inside a kvfs mount keeps it busy with
// no file open and no process in it. kvfs unmount said "files in it are
// open or a process works in it (fuser -vm ... lists them)", which fuser
// does not confirm; it must name the mount in it.
func TestUnmountBusySubmount(t *testing.T) {
	m := newMount(t)
	sub := m.path("sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", sub).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v\n%s", err, out)
	}
	defer exec.Command("umount", sub).Run()
	out, err := exec.Command(kvfsBin, "unmount", m.mnt).CombinedOutput()
	if err == nil {
		t.Fatalf("kvfs unmount of a mount with a mount in it succeeded")
	}
	if !strings.Contains(string(out), "mounted in it: "+sub) {
		t.Fatalf("kvfs unmount does not name the mount in it:\n%s", out)
	}
	if !isMounted(m.mnt) {
		t.Fatalf("kvfs unmount unmounted it anyway")
	}
}
