//go:build linux

package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitKilled waits for a daemon process that was sent SIGKILL. A daemon
// killed while it does I/O on its own mount (go-fuse's WaitMount opens a
// file in the new mount) cannot exit: its last thread waits for a reply
// that only the dead threads could send, and the kernel closes the
// connection only when that thread exits. If the process has not exited
// after a few seconds, the test aborts the mount's FUSE connection, as an
// operator would (docs/MOUNT.md), which ends the wait.
func waitKilled(t testing.TB, cmd *exec.Cmd, mnt string) {
	t.Helper()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	t.Logf("killed daemon %d wedged on its own mount %s: aborting the FUSE connection", cmd.Process.Pid, mnt)
	if err := abortFUSE(mnt); err != nil {
		t.Fatalf("abort the FUSE connection of %s: %v", mnt, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("killed daemon %d did not exit after its connection was aborted", cmd.Process.Pid)
	}
}

// abortFUSE aborts the FUSE connection of the kvfs mount at mnt through
// /sys/fs/fuse/connections, named by the mount's device minor number
// (mountinfo's third field), without touching the mount itself (a stat
// of it would wait too).
func abortFUSE(mnt string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] != mnt {
			continue
		}
		_, minor, ok := strings.Cut(fields[2], ":")
		if !ok {
			continue
		}
		conn := filepath.Join("/sys/fs/fuse/connections", minor)
		if _, err := os.Stat(conn); err != nil {
			// fusectl is not mounted on every system.
			if out, err := exec.Command("mount", "-t", "fusectl", "fusectl", "/sys/fs/fuse/connections").CombinedOutput(); err != nil {
				return fmt.Errorf("mount fusectl: %v: %s", err, out)
			}
		}
		return os.WriteFile(filepath.Join(conn, "abort"), []byte("1"), 0)
	}
	return os.ErrNotExist
}
