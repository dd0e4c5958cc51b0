//go:build linux

package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func init() {
	// pinxattr set|remove PATH: sets or removes user.kvfs.pin; prints the
	// errno's name, or "ok".
	clients["pinxattr"] = func(args []string) error {
		var err error
		if args[0] == "set" {
			err = unix.Setxattr(args[1], "user.kvfs.pin", []byte("1"), 0)
		} else {
			err = unix.Removexattr(args[1], "user.kvfs.pin")
		}
		var en syscall.Errno
		switch {
		case err == nil:
			fmt.Println("ok")
		case errors.As(err, &en):
			fmt.Println(unix.ErrnoName(en))
		default:
			return err
		}
		return nil
	}
}

// TestPinOnlyStoreOwner: pinning decides whose files the capacity evicts,
// so only the store's owner (or root) may pin or unpin, as kvfs pin and
// kvfs config (through the owner's socket) already were: another user
// gets EPERM for a file of their own that they may write, and cannot take
// back the owner's pin of it. Before, both succeeded, and a user's pins
// made the evictor remove the owner's newer files instead (red team, F4).
func TestPinOnlyStoreOwner(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	if err := os.Mkdir(m.path("shared"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(m.path("shared"), 0o777) // past the umask
	u.shOK(t, "echo mine > "+m.path("shared/mine"))
	run := func(as string, args ...string) string {
		t.Helper()
		var cmd *exec.Cmd
		if as == "user" {
			cmd = u.client(t, "pinxattr", args...)
		} else {
			cmd = client("pinxattr", args...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pinxattr %v as %s: %v\n%s", args, as, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("user", "set", m.path("shared/mine")); got != "EPERM" {
		t.Errorf("another user pins their own file: %s, want EPERM", got)
	}
	if got := run("root", "set", m.path("shared/mine")); got != "ok" {
		t.Errorf("the store's owner pins it: %s", got)
	}
	if got := run("user", "remove", m.path("shared/mine")); got != "EPERM" {
		t.Errorf("another user unpins the owner's pin: %s, want EPERM", got)
	}
	if _, err := getxattr(m.path("shared/mine"), "user.kvfs.pin"); err != nil {
		t.Errorf("the owner's pin is gone: %v", err)
	}
	if got := run("root", "remove", m.path("shared/mine")); got != "ok" {
		t.Errorf("the store's owner unpins it: %s", got)
	}
}
