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

// TestSetupInstall: scripts/setup --install puts kvfs, the mount(8)
// helper (pointing at the installed kvfs) and the documentation the
// systemd unit names under PREFIX; the installed kvfs runs; scripts/go
// runs the toolchain; a bad argument is refused.
func TestSetupInstall(t *testing.T) {
	requireRoot(t)
	prefix := t.TempDir()
	sbin := filepath.Join(prefix, "sbin")
	cmd := exec.Command("../scripts/setup", "--install")
	cmd.Env = append(os.Environ(), "PREFIX="+prefix, "SBINDIR="+sbin)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "installed "+prefix+"/bin/kvfs") {
		t.Fatalf("scripts/setup --install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(prefix, "bin", "kvfs"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "kvfs ") {
		t.Fatalf("installed kvfs version: %v\n%s", err, out)
	}
	helper, err := os.ReadFile(filepath.Join(sbin, "mount.fuse.kvfs"))
	if err != nil || !strings.Contains(string(helper), "kvfs=${KVFS:-"+prefix+"/bin/kvfs}") {
		t.Fatalf("installed mount helper: %v\n%s", err, helper)
	}
	unit, _ := os.ReadFile("../contrib/kvfs.service")
	if !strings.Contains(string(unit), "Documentation=file:///usr/local/share/doc/kvfs/MOUNT.md") {
		t.Fatalf("the unit's Documentation= moved: update this test and scripts/setup")
	}
	if _, err := os.Stat(filepath.Join(prefix, "share", "doc", "kvfs", "MOUNT.md")); err != nil {
		t.Fatalf("documentation: %v", err)
	}
	if out, err := exec.Command("../scripts/go", "version").CombinedOutput(); err != nil || !strings.Contains(string(out), "go1.") {
		t.Fatalf("scripts/go version: %v\n%s", err, out)
	}
	out, err = exec.Command("../scripts/setup", "--bogus").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown argument --bogus") {
		t.Fatalf("scripts/setup --bogus: %v\n%s", err, out)
	}
}

// TestScriptsRun: the README's second command, scripts/run, mounts its
// store and copies the example snapshots in; run again after the daemon
// was killed, it detaches the dead mount point, says so, and mounts again
// (before, it failed with "Transport endpoint is not connected").
func TestScriptsRun(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	st, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	m := &mount{store: st, mnt: mnt}
	run := func() string {
		t.Helper()
		cmd := exec.Command("../scripts/run")
		cmd.Env = append(os.Environ(), "KVFS_STORE="+st, "KVFS_MOUNT="+mnt)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/run: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run()
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command(kvfsBin, "unmount", "--lazy", mnt).Run()
		}
		waitUnmounted(t, m)
	})
	if !strings.Contains(out, "mounted "+st) || !strings.Contains(out, "conversation-400.mlxkv") {
		t.Fatalf("scripts/run:\n%s", out)
	}
	syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
	waitUnmounted(t, m) // the daemon is gone
	out = run()
	if !strings.Contains(out, "dead kvfs mount") || !strings.Contains(out, "mounted "+st) {
		t.Fatalf("scripts/run after the daemon was killed:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(mnt, "example", "conversation-300.mlxkv")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(kvfsBin, "unmount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("unmount: %v\n%s", err, out)
	}
}
