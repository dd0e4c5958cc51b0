//go:build linux

package tests

import (
	"bytes"
	"encoding/binary"
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

// TestInodeNumbersStable: a file's inode number is the same from stat,
// fstat and readdir, and stays the same across appends, rewrites in place,
// truncation, renames and a remount, as on a local disk (find -inum, tar,
// rsync -H and backup tools rely on it); another file has another one.
func TestInodeNumbersStable(t *testing.T) {
	m := newMount(t)
	for _, dir := range []string{t.TempDir(), m.mnt} {
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte("one"), 0o644); err != nil {
			t.Fatal(err)
		}
		want := inoOf(t, f)
		check := func(step, path string) {
			t.Helper()
			if got := inoOf(t, path); got != want {
				t.Errorf("%s: after %s, stat says inode %d, want %d", dir, step, got, want)
			}
			ents, err := os.ReadDir(filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Name() == filepath.Base(path) {
					fi, err := e.Info()
					if err != nil {
						t.Fatal(err)
					}
					if got := fi.Sys().(*syscall.Stat_t).Ino; got != want {
						t.Errorf("%s: after %s, readdir says inode %d, want %d", dir, step, got, want)
					}
				}
			}
			var direct []byte
			if d, err := os.Open(filepath.Dir(path)); err == nil {
				buf := make([]byte, 8192)
				n, _ := syscall.ReadDirent(int(d.Fd()), buf)
				direct = buf[:n]
				d.Close()
			}
			if ino, ok := direntIno(direct, filepath.Base(path)); !ok || ino != want {
				t.Errorf("%s: after %s, getdents says inode %d (%v), want %d", dir, step, ino, ok, want)
			}
		}
		a, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		a.Write([]byte(" two"))
		var st syscall.Stat_t
		if err := syscall.Fstat(int(a.Fd()), &st); err != nil || st.Ino != want {
			t.Errorf("%s: fstat of the appending descriptor: inode %d (%v), want %d", dir, st.Ino, err, want)
		}
		a.Close()
		check("an append", f)
		if err := os.WriteFile(f, []byte("rewritten"), 0o644); err != nil {
			t.Fatal(err)
		}
		check("a rewrite in place", f)
		if err := os.Truncate(f, 3); err != nil {
			t.Fatal(err)
		}
		check("a truncate", f)
		g := filepath.Join(dir, "g")
		if err := os.Rename(f, g); err != nil {
			t.Fatal(err)
		}
		check("a rename", g)
		if err := os.WriteFile(f, []byte("another"), 0o644); err != nil {
			t.Fatal(err)
		}
		if inoOf(t, f) == want {
			t.Errorf("%s: a new file has the inode number of another", dir)
		}
		if dir == m.mnt {
			sh(t, kvfsBin+" unmount "+m.mnt)
			m.start(t)
			check("a remount", g)
		}
	}
}

func inoOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// direntIno finds name in a getdents buffer and returns its inode number.
func direntIno(buf []byte, name string) (uint64, bool) {
	for len(buf) >= 19 {
		ino := binary.LittleEndian.Uint64(buf[0:])
		reclen := int(binary.LittleEndian.Uint16(buf[16:]))
		if reclen == 0 || reclen > len(buf) {
			break
		}
		n := buf[19:reclen]
		if i := bytes.IndexByte(n, 0); i >= 0 {
			n = n[:i]
		}
		if string(n) == name {
			return ino, true
		}
		buf = buf[reclen:]
	}
	return 0, false
}
