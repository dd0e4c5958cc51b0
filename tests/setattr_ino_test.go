//go:build linux

package tests

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSetattrKeepsInodeNumber: the attributes of a setattr's reply are
// cached, so they must carry the inode number: after chmod, chown,
// utimes or truncate, stat shows the same st_ino as before, for files and
// directories, not 0 (go-fuse leaves a setattr reply's number unset; tar,
// rsync and git compare device and inode numbers).
func TestSetattrKeepsInodeNumber(t *testing.T) {
	m := newMount(t)
	if err := os.WriteFile(m.path("f"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	ino := func(p string) uint64 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	now := time.Now()
	for _, p := range []string{m.path("f"), m.path("d")} {
		want := ino(p)
		if want == 0 {
			t.Fatalf("%s: st_ino 0 before any change", p)
		}
		for name, op := range map[string]func() error{
			"chmod":  func() error { return os.Chmod(p, 0o600) },
			"chown":  func() error { return os.Chown(p, -1, -1) },
			"utimes": func() error { return os.Chtimes(p, now, now) },
			"truncate": func() error {
				if p == m.path("d") {
					return nil
				}
				return os.Truncate(p, 4)
			},
		} {
			if err := op(); err != nil {
				t.Fatalf("%s %s: %v", name, p, err)
			}
			if got := ino(p); got != want {
				t.Errorf("%s: after %s st_ino is %d, was %d", p, name, got, want)
			}
		}
	}
}
