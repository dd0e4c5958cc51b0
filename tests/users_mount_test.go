//go:build linux

package tests

import (
	"os"
	"strings"
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
