package store

import (
	"io/fs"
	"testing"
)

// TestCredMay checks the class rules of may against what the kernel's
// generic_permission does.
func TestCredMay(t *testing.T) {
	user := &Cred{UID: 1000, GID: 100, Groups: []uint32{20, 30}}
	for _, c := range []struct {
		name     string
		c        *Cred
		mode     fs.FileMode
		uid, gid uint32
		want     uint32
		ok       bool
	}{
		{"daemon", nil, 0, 0, 0, mayRead | mayWrite | mayExec, true},
		{"root reads 0000", &Cred{}, 0, 5, 5, mayRead | mayWrite, true},
		{"root searches a 0000 dir", &Cred{}, fs.ModeDir, 5, 5, mayExec, true},
		{"root executes no 0644 file", &Cred{}, 0o644, 5, 5, mayExec, false},
		{"root executes a 0100 file", &Cred{}, 0o100, 5, 5, mayExec, true},
		{"owner reads 0600", user, 0o600, 1000, 0, mayRead, true},
		{"owner writes 0400", user, 0o400, 1000, 0, mayWrite, false},
		{"owner denied what others may", user, 0o007, 1000, 100, mayRead, false},
		{"group reads 0640", user, 0o640, 0, 100, mayRead, true},
		{"supplementary group reads 0640", user, 0o640, 0, 30, mayRead, true},
		{"group denied what others may", user, 0o607, 0, 20, mayRead, false},
		{"other reads 0600", user, 0o600, 0, 0, mayRead, false},
		{"other reads 0644", user, 0o644, 0, 0, mayRead, true},
		{"other writes and searches 0755 dir", user, fs.ModeDir | 0o755, 0, 0, mayWrite | mayExec, false},
		{"other writes and searches 0777 dir", user, fs.ModeDir | 0o777, 0, 0, mayWrite | mayExec, true},
		{"owner searches 0600 dir", user, fs.ModeDir | 0o600, 1000, 0, mayExec, false},
	} {
		if got := c.c.may(c.mode, c.uid, c.gid, c.want); got != c.ok {
			t.Errorf("%s: may = %v, want %v", c.name, got, c.ok)
		}
	}
}
