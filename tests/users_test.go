//go:build linux

package tests

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// otherUserName is the unprivileged account the tests act as when a test
// needs a second user beside root: created with useradd on first use (CI
// runs as root on a fresh machine) and kept, so that reruns find it.
const otherUserName = "kvfs-test"

// testUser is an ordinary (non-root) account.
type testUser struct {
	name     string
	uid, gid uint32
	home     string
}

var (
	otherUserOnce sync.Once
	otherUserVal  testUser
	otherUserErr  error
)

// otherUser returns the unprivileged test account, creating it if needed.
// It needs root, like the mount tests.
func otherUser(t testing.TB) testUser {
	t.Helper()
	requireRoot(t)
	otherUserOnce.Do(func() {
		if _, err := user.Lookup(otherUserName); err != nil {
			out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", otherUserName).CombinedOutput()
			if err != nil {
				otherUserErr = fmt.Errorf("useradd %s: %v\n%s", otherUserName, err, out)
				return
			}
		}
		u, err := user.Lookup(otherUserName)
		if err != nil {
			otherUserErr = err
			return
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		otherUserVal = testUser{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	})
	if otherUserErr != nil {
		t.Fatal(otherUserErr)
	}
	return otherUserVal
}

// command returns cmd set to run as u, with u's HOME and no
// supplementary groups.
func (u testUser) command(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, "HOME="+u.home, "USER="+u.name, "LOGNAME="+u.name)
	cmd.Dir = "/"
	return cmd
}

// sh runs a shell command line as u and returns its combined output and
// error (the caller decides whether failure is expected).
func (u testUser) sh(script string) (string, error) {
	out, err := u.command(exec.Command("sh", "-c", script)).CombinedOutput()
	return string(out), err
}

// shOK runs a shell command line as u and fails the test on error.
func (u testUser) shOK(t testing.TB, script string) string {
	t.Helper()
	out, err := u.sh(script)
	if err != nil {
		t.Fatalf("as %s: sh -c %q: %v\n%s", u.name, script, err, out)
	}
	return out
}

var (
	sharedTestBinOnce sync.Once
	sharedTestBin     string
	sharedTestBinErr  error
)

// client returns a client process (see client) that runs as u. The test
// binary is copied once next to kvfsBin, in a directory every user may
// enter, because go test builds it in a private directory.
func (u testUser) client(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	sharedTestBinOnce.Do(func() {
		sharedTestBin = filepath.Join(filepath.Dir(kvfsBin), "tests.test")
		sharedTestBinErr = copyExecutable(os.Args[0], sharedTestBin)
	})
	if sharedTestBinErr != nil {
		t.Fatal(sharedTestBinErr)
	}
	cmd := client(name, args...)
	cmd.Path = sharedTestBin
	cmd.Args[0] = sharedTestBin
	return u.command(cmd)
}

func copyExecutable(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// openToOthers lets other users reach the mount point (t.TempDir makes
// private directories): every directory from the test's temporary
// directory down to the mount point becomes 0755. The store stays 0700.
func (m *mount) openToOthers(t testing.TB) {
	t.Helper()
	for d := filepath.Dir(m.mnt); d != "/" && strings.HasPrefix(d, os.TempDir()) && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
