//go:build linux

package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kvfsFails runs the kvfs binary, wants it to fail, and returns its
// standard error.
func kvfsFails(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(kvfsBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("kvfs %s succeeded:\n%s", strings.Join(args, " "), out)
	}
	return stderr.String()
}

// TestMountRefusesStacking: a kvfs mount point cannot be mounted over (it
// would hide the first mount while its daemon runs on), and a mounted
// store cannot be mounted a second time elsewhere: each refusal says
// where the mount is and what to run, and the first mount keeps working.
func TestMountRefusesStacking(t *testing.T) {
	m := newMount(t)
	if err := os.WriteFile(m.path("f"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	kvfs(t, "init", other)
	msg := kvfsFails(t, "mount", other, m.mnt)
	if !strings.Contains(msg, "already a kvfs mount of "+m.store) || !strings.Contains(msg, "kvfs unmount "+m.mnt) {
		t.Errorf("mount over a kvfs mount: %s", msg)
	}
	mnt2 := filepath.Join(t.TempDir(), "mnt2")
	os.Mkdir(mnt2, 0o755)
	msg = kvfsFails(t, "mount", m.store, mnt2)
	if !strings.Contains(msg, "already mounted at "+m.mnt) {
		t.Errorf("second mount of a store: %s", msg)
	}
	if isMounted(mnt2) {
		t.Fatalf("%s was mounted", mnt2)
	}
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "first" {
		t.Fatalf("the first mount after the refusals: %q, %v", b, err)
	}
}

// TestMountErrorsSayWhatToDo: the mount's precondition errors name the
// path and the remedy, without "mount: mount:" stutter: a missing mount
// point (mkdir), a directory that is no store (kvfs init), a mount point
// given as the store, and a store another user cannot read (not "run kvfs
// init", which would be wrong advice).
func TestMountErrorsSayWhatToDo(t *testing.T) {
	m := newMount(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	msg := kvfsFails(t, "mount", m.store+"-none", missing)
	if !strings.Contains(msg, "not a kvfs store") || !strings.Contains(msg, "kvfs init") {
		t.Errorf("not a store: %s", msg)
	}
	other := filepath.Join(dir, "other")
	kvfs(t, "init", other)
	msg = kvfsFails(t, "mount", other, missing)
	if !strings.Contains(msg, "mount point "+missing+" does not exist") || !strings.Contains(msg, "mkdir -p "+missing) || strings.Contains(msg, "mount: mount:") {
		t.Errorf("missing mount point: %s", msg)
	}
	msg = kvfsFails(t, "mount", m.mnt, filepath.Join(dir))
	if !strings.Contains(msg, "is a kvfs mount point (of the store "+m.store+")") {
		t.Errorf("a mount point as the store: %s", msg)
	}
	// Commands that take a store, given the mount point instead.
	msg = kvfsFails(t, "ls", m.mnt)
	if !strings.Contains(msg, "kvfs mount point") || !strings.Contains(msg, m.store) || strings.Contains(msg, "kvfs init") {
		t.Errorf("kvfs ls MOUNTPOINT: %s", msg)
	}
	if _, err := os.Stat(m.path("kvfs.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("kvfs ls of the mount point made a store in it: %v", err)
	}

	u := otherUser(t)
	private := filepath.Join(dir, "private")
	kvfs(t, "init", private)
	os.Chmod(dir, 0o755)
	os.Chmod(private, 0o700)
	umnt := filepath.Join(dir, "umnt")
	os.Mkdir(umnt, 0o777)
	out, err := u.sh(kvfsBin + " mount " + private + " " + umnt)
	if err == nil || !strings.Contains(out, "permission denied") || strings.Contains(out, "kvfs init") {
		t.Errorf("another user's store: %v\n%s", err, out)
	}
}

// TestMountOverDeadMount: a daemon killed leaves its mount point dead
// ("transport endpoint is not connected"); kvfs mount, as root, detaches
// it with a line saying so and mounts, and the files committed before the
// kill are there.
func TestMountOverDeadMount(t *testing.T) {
	m := newMount(t)
	sh(t, "printf committed > "+m.path("f")+" && sync "+m.path("f"))
	syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(m.mnt, &st)
		if errors.Is(err, syscall.ENOTCONN) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount point after the kill: %v, want ENOTCONN", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitUnmounted(t, m) // the daemon has let go of the store
	cmd := exec.Command(kvfsBin, "mount", m.store, m.mnt)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dead kvfs mount") {
		t.Fatalf("mount over a dead mount: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "committed" {
		t.Fatalf("after the remount: %q, %v", b, err)
	}
	if n := strings.Count(strings.Join(kvfsMounts(), "\n"), m.mnt); n != 1 {
		t.Fatalf("%d kvfs mounts at %s, want 1: %v", n, m.mnt, kvfsMounts())
	}
}

// TestUnmountOnlyKvfs: kvfs unmount, even as root, refuses a mount that is
// not kvfs (a tmpfs stays mounted) and a directory that is no mount point,
// naming what it found (and, for a directory inside a kvfs mount, the
// mount point to give); a busy kvfs mount's error points at --lazy, which
// then detaches it.
func TestUnmountOnlyKvfs(t *testing.T) {
	requireRoot(t)
	tmp := t.TempDir()
	if err := syscall.Mount("tmpfs", tmp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(tmp, syscall.MNT_DETACH)
	msg := kvfsFails(t, "unmount", tmp)
	if !strings.Contains(msg, "not a kvfs mount (a tmpfs mount") {
		t.Errorf("unmount of a tmpfs: %s", msg)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(tmp, &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
		t.Fatalf("the tmpfs at %s is gone: %v", tmp, err)
	}
	plain := t.TempDir()
	if msg := kvfsFails(t, "unmount", plain); !strings.Contains(msg, "unmount "+plain+": it is not mounted") {
		t.Errorf("unmount of a plain directory: %s", msg)
	}

	// A busy mount is retried for a few seconds (in-flight closes), then
	// refused, naming the processes that hold it: one with a file of it
	// open, one working in a directory of it.
	m := newMount(t)
	os.WriteFile(m.path("f"), []byte("x"), 0o644)
	os.Mkdir(m.path("d"), 0o755)
	if msg := kvfsFails(t, "unmount", m.path("d")); !strings.Contains(msg, "inside the kvfs mount at "+m.mnt+" (kvfs unmount "+m.mnt) {
		t.Errorf("unmount of a directory in a mount: %s", msg)
	}
	holder := exec.Command("sh", "-c", "exec sleep 60 < "+m.path("f"))
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	worker := exec.Command("sleep", "60")
	worker.Dir = m.path("d")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { worker.Process.Kill(); worker.Wait() }()
	waitHolds(t, holder.Process.Pid, m.path("f"))
	t0 := time.Now()
	msg = kvfsFails(t, "unmount", m.mnt)
	waited := time.Since(t0)
	if !strings.Contains(msg, "busy") || !strings.Contains(msg, "kvfs unmount --lazy "+m.mnt) {
		t.Errorf("unmount of a busy mount: %s", msg)
	}
	for _, w := range []string{fmt.Sprintf("PID %d (sleep)", holder.Process.Pid), m.path("f"), fmt.Sprintf("PID %d (sleep)", worker.Process.Pid), m.path("d")} {
		if !strings.Contains(msg, w) {
			t.Errorf("unmount of a busy mount does not name %q: %s", w, msg)
		}
	}
	if waited < 2*time.Second {
		t.Errorf("unmount called the mount busy after %v; want it retried for a few seconds first", waited)
	}
	kvfs(t, "unmount", "--lazy", m.mnt)
	if isMounted(m.mnt) {
		t.Fatalf("%s still mounted after --lazy", m.mnt)
	}
	holder.Process.Kill()
	holder.Wait()
	worker.Process.Kill()
	worker.Wait()
	waitUnmounted(t, m)
}

// waitHolds waits until process pid has path open.
func waitHolds(t testing.TB, pid int, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); l == path {
				return
			}
		}
	}
	t.Fatalf("process %d did not open %s", pid, path)
}

// TestUnmountWaitsForClose: kvfs unmount right after a workload ends
// succeeds. A process that closes its last file of the mount and exits
// just before; and one that still holds a file when the unmount starts
// and lets go of it (exits) half a second later, as a workload's last
// close still in flight does: the unmount waits for it instead of
// calling the mount busy.
func TestUnmountWaitsForClose(t *testing.T) {
	m := newMount(t)
	if err := os.WriteFile(m.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "cat "+m.path("f")+" > /dev/null && echo y > "+m.path("g"))
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)

	m.start(t)
	late := exec.Command("sh", "-c", "exec sleep 0.5 < "+m.path("f"))
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	defer late.Wait()
	waitHolds(t, late.Process.Pid, m.path("f"))
	t0 := time.Now()
	out, err := exec.Command(kvfsBin, "unmount", m.mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("unmount while a file's last close is half a second away: %v\n%s", err, out)
	}
	if isMounted(m.mnt) {
		t.Fatalf("%s still mounted", m.mnt)
	}
	t.Logf("unmounted after %v", time.Since(t0))
	waitUnmounted(t, m)
}
