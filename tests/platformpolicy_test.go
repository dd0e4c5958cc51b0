//go:build linux

package tests

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLinuxPlatformPolicy guards Linux's answers through a real mount now
// that rename flags, fallocate modes, xattr names and missing attributes
// are decided by per-platform tables (fs/platform.go): renameat2(2)'s
// flags keep their meaning (no-replace honoured, exchange and whiteout
// EINVAL), every fallocate mode is EOPNOTSUPP and changes nothing, only
// user.* names are stored (com.apple.* is macOS's), XATTR_CREATE and
// XATTR_REPLACE keep Linux's values, and a missing
// attribute is ENODATA. Each answer is the one kvfs gave before the
// tables; the darwin answers are the table tests in fs.
func TestLinuxPlatformPolicy(t *testing.T) {
	m := newMount(t)
	x, y := m.path("x"), m.path("y")
	for p, v := range map[string]string{x: "xx", y: "yy"} {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		flags uint
		want  error
	}{
		{"RENAME_NOREPLACE over a file", unix.RENAME_NOREPLACE, syscall.EEXIST},
		{"RENAME_EXCHANGE", unix.RENAME_EXCHANGE, syscall.EINVAL},
		{"RENAME_WHITEOUT", unix.RENAME_WHITEOUT, syscall.EINVAL},
		{"darwin's RENAME_EXCL bit (Linux's whiteout)", 0x4, syscall.EINVAL},
	} {
		if err := renameat2sys(x, y, c.flags); err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := renameat2sys(x, m.path("z"), unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE to a free name: %v", err)
	}

	f, err := os.OpenFile(m.path("z"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE} {
		if err := unix.Fallocate(int(f.Fd()), mode, 0, 1<<20); err != syscall.EOPNOTSUPP {
			t.Errorf("fallocate mode %#x: %v, want EOPNOTSUPP", mode, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(m.path("z")); err != nil || !bytes.Equal(b, []byte("xx")) {
		t.Errorf("after the refused fallocates: %q, %v; want \"xx\"", b, err)
	}

	if err := syscall.Setxattr(y, "com.apple.FinderInfo", make([]byte, 32), 0); err != syscall.EOPNOTSUPP {
		t.Errorf("set com.apple.FinderInfo on Linux: %v, want EOPNOTSUPP", err)
	}
	if err := unix.Setxattr(y, "user.a", []byte("1"), unix.XATTR_CREATE); err != nil {
		t.Errorf("XATTR_CREATE of a new attribute: %v", err)
	}
	if err := unix.Setxattr(y, "user.a", []byte("2"), unix.XATTR_CREATE); err != syscall.EEXIST {
		t.Errorf("XATTR_CREATE of an existing attribute: %v, want EEXIST", err)
	}
	if err := unix.Setxattr(y, "user.b", []byte("1"), unix.XATTR_REPLACE); err != syscall.ENODATA {
		t.Errorf("XATTR_REPLACE of a missing attribute: %v, want ENODATA", err)
	}
	if err := unix.Setxattr(y, "user.a", []byte("3"), unix.XATTR_REPLACE); err != nil {
		t.Errorf("XATTR_REPLACE of an existing attribute: %v", err)
	}
	if _, err := getxattr(y, "user.missing"); err != syscall.ENODATA {
		t.Errorf("missing attribute: %v, want ENODATA", err)
	}
	if err := syscall.Removexattr(y, "com.apple.quarantine"); err != syscall.ENODATA {
		t.Errorf("remove com.apple.quarantine on Linux: %v, want ENODATA", err)
	}
}
