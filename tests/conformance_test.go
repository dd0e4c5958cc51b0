package tests

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestModesAtCreate: a file or directory gets the mode its creator asked
// for, the umask applied, the set-user-ID, set-group-ID and sticky bits
// kept, and 0000 kept as 0000: through the mount as in a plain directory,
// which proves the expectations.
func TestModesAtCreate(t *testing.T) {
	m := newMount(t)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	cases := []struct {
		name string
		dir  bool
		mode uint32
		want uint32
	}{
		{"f0000", false, 0, 0},
		{"f0666", false, 0o666, 0o644},
		{"f4755", false, 0o4755, 0o4755},
		{"f2755", false, 0o2755, 0o2755},
		{"d0000", true, 0, 0},
		{"d1777", true, 0o1777, 0o1755},
		{"d0777", true, 0o777, 0o755},
	}
	for _, dir := range []string{t.TempDir(), m.mnt} {
		for _, c := range cases {
			p := filepath.Join(dir, c.name)
			var err error
			if c.dir {
				err = syscall.Mkdir(p, c.mode)
			} else {
				var fd int
				fd, err = syscall.Open(p, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, c.mode)
				if err == nil {
					syscall.Close(fd)
				}
			}
			if err != nil {
				t.Errorf("%s: create %s: %v", dir, c.name, err)
				continue
			}
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				t.Errorf("%s: stat %s: %v", dir, c.name, err)
				continue
			}
			if got := st.Mode & 0o7777; got != c.want {
				t.Errorf("%s: %s created with %04o has mode %04o, want %04o", dir, c.name, c.mode, got, c.want)
			}
		}
	}
	// The modes stay across a remount.
	sh(t, kvfsBin+" unmount "+m.mnt)
	m.start(t)
	for _, c := range cases {
		fi, err := os.Stat(m.path(c.name))
		if err != nil {
			t.Fatal(err)
		}
		var st = fi.Sys().(*syscall.Stat_t)
		if got := st.Mode & 0o7777; got != c.want {
			t.Errorf("after remount: %s has mode %04o, want %04o", c.name, got, c.want)
		}
	}
}

// TestStatfsInodes: statfs reports consistent inode counts (used =
// files - free is the number of entries, never negative), as df -i reads
// them.
func TestStatfsInodes(t *testing.T) {
	m := newMount(t)
	var before syscall.Statfs_t
	if err := syscall.Statfs(m.mnt, &before); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(m.path(n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ffree > st.Files {
		t.Fatalf("statfs: %d free inodes of %d", st.Ffree, st.Files)
	}
	if used, was := st.Files-st.Ffree, before.Files-before.Ffree; used != was+3 {
		t.Errorf("statfs: %d inodes used after creating 3 files, %d before", used, was)
	}
	if st.Namelen != 255 {
		t.Errorf("statfs: name length %d, want 255", st.Namelen)
	}
}
