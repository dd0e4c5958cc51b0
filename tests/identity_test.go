//go:build linux

package tests

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestRewriteKeepsIdentity: identity is not content (docs/DESIGN.md,
// "Invariants"). A file rewritten in place by another process (truncated
// and written anew, then appended to, each committed) keeps its inode
// number, owner, mode, its user attributes and its pin (user.kvfs.pin),
// and reads back the new bytes; a file renamed over it is another file.
func TestRewriteKeepsIdentity(t *testing.T) {
	m := newMount(t)
	p := m.path("f")
	if err := os.WriteFile(p, []byte("first version"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(p, "user.note", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "pin", p)
	var before syscall.Stat_t
	if err := syscall.Stat(p, &before); err != nil {
		t.Fatal(err)
	}
	want := "second version, longer than the first"
	sh(t, fmt.Sprintf("printf %%s '%s' > %s && printf %%s ' and appended' >> %s", want, p, p))
	want += " and appended"
	var after syscall.Stat_t
	if err := syscall.Stat(p, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino || after.Uid != 1234 || after.Gid != 5678 || after.Mode&0o7777 != 0o640 {
		t.Fatalf("after the rewrite: ino %d (was %d), owner %d:%d, mode %o", after.Ino, before.Ino, after.Uid, after.Gid, after.Mode&0o7777)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != want {
		t.Fatalf("read back %q, %v; want %q", got, err, want)
	}
	for name, v := range map[string]string{"user.note": "kept", "user.kvfs.pin": ""} {
		got, err := getxattr(p, name)
		if err != nil || name == "user.note" && got != v {
			t.Errorf("%s after the rewrite: %q, %v", name, got, err)
		}
	}
	// Renamed over: the name now holds another file, with its own.
	q := m.path("g")
	if err := os.WriteFile(q, []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q, p); err != nil {
		t.Fatal(err)
	}
	var replaced syscall.Stat_t
	if err := syscall.Stat(p, &replaced); err != nil {
		t.Fatal(err)
	}
	if replaced.Ino == before.Ino {
		t.Fatal("a file renamed over kept the old file's inode number")
	}
	if _, err := getxattr(p, "user.note"); err != syscall.ENODATA {
		t.Fatalf("the replaced file's attribute on the new one: %v", err)
	}
}
