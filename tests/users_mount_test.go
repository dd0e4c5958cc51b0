//go:build linux

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOtherUserAccess checks what another user gets from a root mount:
// nothing without allow_other; with it, what the modes allow and no more.
func TestOtherUserAccess(t *testing.T) {
	u := otherUser(t)
	t.Run("private", func(t *testing.T) {
		m := newMount(t)
		m.openToOthers(t)
		if err := os.WriteFile(m.path("f"), []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := u.sh("cat " + m.path("f"))
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("another user read a mount without allow_other: %v %q", err, out)
		}
	})
	t.Run("allow_other", func(t *testing.T) {
		m := newMount(t, "-o", "allow_other")
		m.openToOthers(t)
		if err := os.WriteFile(m.path("f"), []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.path("secret"), []byte("root's secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := u.shOK(t, "cat "+m.path("f")); got != "root's" {
			t.Fatalf("other user read %q", got)
		}
		if out, err := u.sh("cat " + m.path("secret")); err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("other user read a 0600 file of root's: %v %q", err, out)
		}
		if out, err := u.sh("touch " + m.path("mine")); err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("other user created a file in root's 0755 root: %v %q", err, out)
		}
		if err := os.Mkdir(m.path("shared"), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(m.path("shared"), 0o777); err != nil {
			t.Fatal(err)
		}
		u.shOK(t, "echo hi > "+m.path("shared/mine"))
		if got := u.shOK(t, "stat -c %U "+m.path("shared/mine")); strings.TrimSpace(got) != u.name {
			t.Fatalf("file created by %s is owned by %q", u.name, got)
		}
		// The client (this test binary) runs as the other user too.
		out, err := u.client(t, "whoami").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != u.name {
			t.Fatalf("client as %s: %v %q", u.name, err, out)
		}
	})
}

// TestControlSocketPrivate: a daemon started under a umask of 0 still
// makes its control socket 0600 (it never exists with another mode:
// cmd/kvfs's TestControlSocketNeverLoose), leaves no private directory in
// the store, and another user who can reach the store directory cannot
// connect to it.
func TestControlSocketPrivate(t *testing.T) {
	u := otherUser(t)
	m := newMount(t)
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	old := syscall.Umask(0)
	m.start(t)
	syscall.Umask(old)
	sock := filepath.Join(m.store, "kvfs.sock")
	var st syscall.Stat_t
	if err := syscall.Lstat(sock, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Mode&0o7777 != 0o600 {
		t.Fatalf("%s: mode %o, %v; want a socket of mode 0600", sock, st.Mode, err)
	}
	if left, _ := filepath.Glob(filepath.Join(m.store, ".sock*")); len(left) != 0 {
		t.Errorf("private directories left in the store: %v", left)
	}
	if !strings.Contains(kvfs(t, "stats", m.store), "stored") {
		t.Error("kvfs stats through the socket said no stored size")
	}
	m.openToOthers(t)
	if err := os.Chmod(m.store, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := u.sh(fmt.Sprintf(`python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(%q)'`, sock))
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("another user connected to the control socket: %v %q", err, out)
	}
}
