//go:build linux

package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The time tests of the POSIX conformance suite: each case runs in a plain
// directory (t.TempDir(), which proves the expectations) and in the mount.
// Times are read with stat(1), another process, as ls, make or rsync would.

// fileTimes are a file's access, modification and status change times.
type fileTimes struct{ atime, mtime, ctime time.Time }

// statTimes reads path's times with stat(1), in nanoseconds.
func statTimes(t *testing.T, path string) fileTimes {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%.9X %.9Y %.9Z", path).CombinedOutput()
	if err != nil {
		t.Fatalf("stat %s: %v: %s", path, err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		t.Fatalf("stat %s: %q", path, out)
	}
	var ts [3]time.Time
	for i, s := range f {
		sec, nsec, _ := strings.Cut(s, ".")
		a, err1 := strconv.ParseInt(sec, 10, 64)
		b, err2 := strconv.ParseInt(nsec, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("stat %s: %q", path, out)
		}
		ts[i] = time.Unix(a, b)
	}
	return fileTimes{ts[0], ts[1], ts[2]}
}

// timesDirs are the directories each case runs in: a plain one first.
func timesDirs(t *testing.T) (string, *mount) {
	m := newMount(t)
	return t.TempDir(), m
}

// past times that no clock reading of the test can produce.
var (
	pastA = time.Unix(1000000000, 111111111)
	pastM = time.Unix(1200000000, 222222222)
)

func utimensat(t *testing.T, path string, atime, mtime unix.Timespec) {
	t.Helper()
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{atime, mtime}, 0); err != nil {
		t.Fatalf("utimensat %s: %v", path, err)
	}
}

func ts(tm time.Time) unix.Timespec { return unix.NsecToTimespec(tm.UnixNano()) }

var (
	utimeNow  = unix.Timespec{Nsec: unix.UTIME_NOW}
	utimeOmit = unix.Timespec{Nsec: unix.UTIME_OMIT}
)

// TestTimesSetBeforeClose: times set with futimens on a file that was
// written and is still open survive its close (cp -p, tar x), and fsync; a
// write after them makes the mtime now again.
func TestTimesSetBeforeClose(t *testing.T) {
	plain, m := timesDirs(t)
	for _, dir := range []string{plain, m.mnt} {
		for _, sync := range []bool{false, true} {
			p := filepath.Join(dir, fmt.Sprintf("kept-%v", sync))
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("content set before close")); err != nil {
				t.Fatal(err)
			}
			if err := unix.UtimesNanoAt(int(f.Fd()), "", []unix.Timespec{ts(pastA), ts(pastM)}, unix.AT_EMPTY_PATH); err != nil {
				t.Fatalf("futimens: %v", err)
			}
			if sync {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				if got := statTimes(t, p); !got.mtime.Equal(pastM) {
					t.Errorf("%s: mtime after futimens and fsync %v, want %v", p, got.mtime, pastM)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got := statTimes(t, p)
			if !got.mtime.Equal(pastM) || !got.atime.Equal(pastA) {
				t.Errorf("%s: after futimens, close: atime %v mtime %v, want %v %v", p, got.atime, got.mtime, pastA, pastM)
			}
		}
		// A write after the futimens is a modification: mtime is now.
		p := filepath.Join(dir, "written-after")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("one"))
		if err := unix.UtimesNanoAt(int(f.Fd()), "", []unix.Timespec{ts(pastA), ts(pastM)}, unix.AT_EMPTY_PATH); err != nil {
			t.Fatalf("futimens: %v", err)
		}
		before := time.Now().Add(-time.Second)
		f.Write([]byte("two"))
		f.Close()
		if got := statTimes(t, p); got.mtime.Before(before) || !got.atime.Equal(pastA) {
			t.Errorf("%s: write after futimens: atime %v mtime %v, want %v and now", p, got.atime, got.mtime, pastA)
		}
	}
}

// TestTimesAtime: the access time can be set alone (touch -a,
// UTIME_OMIT for the mtime) and the mtime alone (UTIME_OMIT for the atime);
// UTIME_NOW sets now; every change sets the ctime to now, which cannot be
// set to anything else. All of it survives a remount.
func TestTimesAtime(t *testing.T) {
	plain, m := timesDirs(t)
	for _, dir := range []string{plain, m.mnt} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now().Add(-time.Second)
		utimensat(t, p, ts(pastA), ts(pastM))
		sh(t, "touch -a -d @1100000000.5 "+p)
		want := time.Unix(1100000000, 5e8)
		got := statTimes(t, p)
		if !got.atime.Equal(want) || !got.mtime.Equal(pastM) {
			t.Errorf("%s: touch -a: atime %v mtime %v, want %v %v", dir, got.atime, got.mtime, want, pastM)
		}
		if got.ctime.Before(start) {
			t.Errorf("%s: touch -a: ctime %v, want now (after %v)", dir, got.ctime, start)
		}
		utimensat(t, p, utimeOmit, ts(pastA))
		if got := statTimes(t, p); !got.atime.Equal(want) || !got.mtime.Equal(pastA) {
			t.Errorf("%s: UTIME_OMIT atime: atime %v mtime %v, want %v %v", dir, got.atime, got.mtime, want, pastA)
		}
		utimensat(t, p, utimeNow, utimeOmit)
		if got := statTimes(t, p); got.atime.Before(start) || !got.mtime.Equal(pastA) {
			t.Errorf("%s: UTIME_NOW atime: atime %v mtime %v, want now %v", dir, got.atime, got.mtime, pastA)
		}
		utimensat(t, p, ts(pastA), utimeNow)
		got = statTimes(t, p)
		if !got.atime.Equal(pastA) || got.mtime.Before(start) || got.ctime.Before(start) {
			t.Errorf("%s: UTIME_NOW mtime: %+v", dir, got)
		}
		utimensat(t, p, ts(pastA), ts(pastM))
		if dir == m.mnt {
			sh(t, kvfsBin+" unmount "+m.mnt)
			m.start(t)
		}
		if got := statTimes(t, p); !got.atime.Equal(pastA) || !got.mtime.Equal(pastM) || got.ctime.Before(start) {
			t.Errorf("%s: later: %+v", dir, got)
		}
		// Reading is no modification; the atime is not required to move
		// (kvfs does not update it on read: noatime), but the mtime must
		// not.
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
		if got := statTimes(t, p); !got.mtime.Equal(pastM) {
			t.Errorf("%s: read changed the mtime to %v", dir, got.mtime)
		}
	}
}

// TestTimesWriteWhileOpen: a write changes the mtime and ctime at once, as
// another process sees them while the writer still has the file open, and
// what that process sees after the close is the last write's time, not a
// value cached before it.
func TestTimesWriteWhileOpen(t *testing.T) {
	plain, m := timesDirs(t)
	for _, dir := range []string{plain, m.mnt} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("old content"), 0o644); err != nil {
			t.Fatal(err)
		}
		utimensat(t, p, ts(pastA), ts(pastM))
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now().Add(-time.Second)
		if _, err := f.WriteAt([]byte("new"), 0); err != nil {
			t.Fatal(err)
		}
		first := statTimes(t, p)
		if first.mtime.Before(before) || first.ctime.Before(before) || !first.atime.Equal(pastA) {
			t.Errorf("%s: after a write, still open: %+v, want mtime and ctime now, atime %v", dir, first, pastA)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := f.WriteAt([]byte("newer"), 3); err != nil {
			t.Fatal(err)
		}
		second := statTimes(t, p)
		if !second.mtime.After(first.mtime) {
			t.Errorf("%s: a second write left the mtime at %v", dir, second.mtime)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := f.WriteAt([]byte("!"), 8); err != nil {
			t.Fatal(err)
		}
		lastWrite := time.Now()
		time.Sleep(50 * time.Millisecond)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		got := statTimes(t, p)
		if !got.mtime.After(second.mtime) || got.mtime.After(lastWrite) {
			t.Errorf("%s: after close: mtime %v, want the last write's (after %v, by %v)", dir, got.mtime, second.mtime, lastWrite)
		}
		if !got.atime.Equal(pastA) {
			t.Errorf("%s: writing changed the atime to %v", dir, got.atime)
		}
	}
}

// TestTimesCtime: chmod, chown and rename change the ctime and not the
// mtime.
func TestTimesCtime(t *testing.T) {
	plain, m := timesDirs(t)
	for _, dir := range []string{plain, m.mnt} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		utimensat(t, p, ts(pastA), ts(pastM))
		for _, step := range []struct {
			name string
			do   func() error
		}{
			{"chmod", func() error { return os.Chmod(p, 0o600) }},
			{"chown", func() error { return os.Chown(p, 0, 0) }},
			{"rename", func() error {
				q := filepath.Join(dir, "g")
				if err := os.Rename(p, q); err != nil {
					return err
				}
				p = q
				return nil
			}},
		} {
			prev := statTimes(t, p)
			time.Sleep(20 * time.Millisecond)
			if err := step.do(); err != nil {
				t.Fatalf("%s: %s: %v", dir, step.name, err)
			}
			got := statTimes(t, p)
			if !got.ctime.After(prev.ctime) || !got.mtime.Equal(pastM) || !got.atime.Equal(pastA) {
				t.Errorf("%s: %s: %+v after %+v: want a later ctime, the same mtime %v and atime", dir, step.name, got, prev, pastM)
			}
		}
	}
}

// TestTimesDirectory: a directory's mtime and ctime change when an entry
// is created, removed or renamed in it (both directories of a move), and
// not when a file in it is rewritten; they survive a remount.
func TestTimesDirectory(t *testing.T) {
	plain, m := timesDirs(t)
	for _, dir := range []string{plain, m.mnt} {
		d, e := filepath.Join(dir, "d"), filepath.Join(dir, "e")
		for _, x := range []string{d, e} {
			if err := os.Mkdir(x, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, step := range []struct {
			name string
			do   func() error
			dirs []string
		}{
			{"create", func() error { return os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644) }, []string{d}},
			{"mkdir", func() error { return os.Mkdir(filepath.Join(d, "sub"), 0o755) }, []string{d}},
			{"rename in", func() error { return os.Rename(filepath.Join(d, "f"), filepath.Join(d, "g")) }, []string{d}},
			{"rename across", func() error { return os.Rename(filepath.Join(d, "g"), filepath.Join(e, "g")) }, []string{d, e}},
			{"unlink", func() error { return os.Remove(filepath.Join(e, "g")) }, []string{e}},
			{"rmdir", func() error { return os.Remove(filepath.Join(d, "sub")) }, []string{d}},
		} {
			for _, x := range []string{d, e} {
				utimensat(t, x, ts(pastA), ts(pastM))
			}
			start := statTimes(t, d).ctime
			time.Sleep(20 * time.Millisecond)
			if err := step.do(); err != nil {
				t.Fatalf("%s: %s: %v", dir, step.name, err)
			}
			for _, x := range step.dirs {
				if got := statTimes(t, x); !got.mtime.After(pastM) || !got.ctime.After(start) || !got.atime.Equal(pastA) {
					t.Errorf("%s: %s: directory %s has %+v, want mtime and ctime now, atime %v", dir, step.name, x, got, pastA)
				}
			}
		}
		// Rewriting and appending to a file leave its directory alone,
		// through a remount (which drops what the kernel cached).
		f := filepath.Join(d, "kept")
		if err := os.WriteFile(f, []byte("one"), 0o644); err != nil {
			t.Fatal(err)
		}
		utimensat(t, d, ts(pastA), ts(pastM))
		if err := os.WriteFile(f, []byte("two"), 0o644); err != nil {
			t.Fatal(err)
		}
		if dir == m.mnt {
			sh(t, kvfsBin+" unmount "+m.mnt)
			m.start(t)
		}
		if got := statTimes(t, d); !got.mtime.Equal(pastM) || !got.atime.Equal(pastA) {
			t.Errorf("%s: rewriting a file changed its directory's times: %+v", dir, got)
		}
	}
}

// TestTimesCpTar: cp -p and tar x into the mount keep the modification
// times of the source (to the nanosecond, with tar's POSIX format), as they
// do into a plain directory. (Access times are not compared: cp reads the
// source, which moves its atime on a relatime disk.)
func TestTimesCpTar(t *testing.T) {
	for _, tool := range []string{"cp", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: %v", tool, err)
		}
	}
	plain, m := timesDirs(t)
	src := t.TempDir()
	type file struct {
		name  string
		size  int
		mtime time.Time
	}
	files := []file{
		{"empty", 0, time.Unix(1300000000, 123456789)},
		{"small", 100, time.Unix(1400000000, 987654321)},
		{"large", 5 << 20, time.Unix(1500000000, 5)},
		{"sub/nested", 4096, time.Unix(1600000000, 0)},
	}
	for _, f := range files {
		p := filepath.Join(src, f.name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, randBytes(f.size, uint64(f.size)), 0o640); err != nil {
			t.Fatal(err)
		}
		utimensat(t, p, ts(pastA), ts(f.mtime))
	}
	sh(t, fmt.Sprintf("tar --format=posix -C %s -cf %s/src.tar empty small large sub", src, plain))
	for _, dir := range []string{plain, m.mnt} {
		for _, tool := range []string{"cp", "tar"} {
			dst := filepath.Join(dir, tool)
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			if tool == "cp" {
				sh(t, fmt.Sprintf("cp -rp %s/. %s/", src, dst))
			} else {
				sh(t, fmt.Sprintf("tar -C %s -xpf %s/src.tar", dst, plain))
			}
			for _, f := range files {
				got := statTimes(t, filepath.Join(dst, f.name))
				if !got.mtime.Equal(f.mtime) {
					t.Errorf("%s: %s: %s has mtime %v, the source %v", dir, tool, f.name, got.mtime, f.mtime)
				}
			}
		}
	}
}
