package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeUnmount records what kvfs unmount does and answers as scripted.
type fakeUnmount struct {
	calls    []string        // "unmount MNT FLAGS" and the programs run
	unmount  error           // unmount(2)'s answer
	programs map[string]bool // what lookPath finds
	out      map[string]string
	fail     map[string]bool // programs that exit non-zero
}

func (f *fakeUnmount) sys(root bool) unmountSys {
	return unmountSys{
		root: root,
		unmount: func(mnt string, flags int) error {
			f.calls = append(f.calls, "unmount "+mnt+" "+flagName(flags))
			return f.unmount
		},
		lookPath: func(file string) (string, error) {
			if f.programs[file] {
				return "/usr/bin/" + file, nil
			}
			return "", exec.ErrNotFound
		},
		run: func(name string, args ...string) ([]byte, error) {
			f.calls = append(f.calls, name+" "+strings.Join(args, " "))
			if f.fail[name] {
				return []byte(f.out[name]), errors.New("exit status 1")
			}
			return []byte(f.out[name]), nil
		},
	}
}

func flagName(flags int) string {
	switch flags {
	case 0:
		return "0"
	case detachFlag:
		return "detach"
	}
	return "?"
}

// TestUnmountDecisions: on Linux kvfs unmount does what it always did
// (unmount(2) as root, lazily with --lazy; fusermount3 -u [-z] otherwise);
// on macOS it refuses --lazy, tries the plain unmount, then diskutil
// unmount, and when both fail on a busy mount says how to force it
// without forcing it.
func TestUnmountDecisions(t *testing.T) {
	const mnt = "/m"
	busyDiskutil := "Volume kvfs on /m failed to unmount: dissented by PID 42 (/usr/bin/python3)"
	for _, c := range []struct {
		name     string
		goos     string
		root     bool
		lazy     bool
		unmount  error
		programs []string
		fail     []string
		out      map[string]string
		calls    []string
		err      []string // substrings; none: success
		usage    bool
	}{
		{name: "linux root", goos: "linux", root: true, calls: []string{"unmount /m 0"}},
		{name: "linux root lazy", goos: "linux", root: true, lazy: true, calls: []string{"unmount /m detach"}},
		{name: "linux root busy", goos: "linux", root: true, unmount: syscall.EBUSY, calls: []string{"unmount /m 0"},
			err: []string{"busy", "fuser -vm /m", "kvfs unmount --lazy /m"}},
		{name: "linux root other error", goos: "linux", root: true, unmount: syscall.EINVAL, calls: []string{"unmount /m 0"},
			err: []string{"unmount /m: invalid argument"}},
		{name: "linux user", goos: "linux", programs: []string{"fusermount3", "fusermount"}, calls: []string{"/usr/bin/fusermount3 -u /m"}},
		{name: "linux user lazy", goos: "linux", lazy: true, programs: []string{"fusermount3"}, calls: []string{"/usr/bin/fusermount3 -u -z /m"}},
		{name: "linux user old fuse", goos: "linux", programs: []string{"fusermount"}, calls: []string{"/usr/bin/fusermount -u /m"}},
		{name: "linux user busy", goos: "linux", programs: []string{"fusermount3"}, fail: []string{"/usr/bin/fusermount3"},
			out:   map[string]string{"/usr/bin/fusermount3": "fusermount3: failed to unmount /m: Device or resource busy"},
			calls: []string{"/usr/bin/fusermount3 -u /m"}, err: []string{"Device or resource busy; kvfs unmount --lazy /m"}},
		{name: "linux user no fusermount", goos: "linux", err: []string{"no fusermount3"}},

		{name: "mac", goos: "darwin", calls: []string{"unmount /m 0"}},
		{name: "mac root", goos: "darwin", root: true, calls: []string{"unmount /m 0"}},
		{name: "mac lazy", goos: "darwin", lazy: true, usage: true, err: []string{"--lazy is not supported on macOS", "diskutil unmount force /m"}},
		{name: "mac diskutil", goos: "darwin", unmount: syscall.EBUSY, calls: []string{"unmount /m 0", diskutil + " unmount /m"}},
		{name: "mac busy", goos: "darwin", unmount: syscall.EBUSY, fail: []string{diskutil}, out: map[string]string{diskutil: busyDiskutil},
			calls: []string{"unmount /m 0", diskutil + " unmount /m"},
			err:   []string{"busy", "lsof +f -- /m", "dissented by PID 42", "diskutil unmount force /m"}},
		{name: "mac not permitted", goos: "darwin", unmount: syscall.EPERM, fail: []string{diskutil}, out: map[string]string{diskutil: "Unmount failed for /m"},
			calls: []string{"unmount /m 0", diskutil + " unmount /m"}, err: []string{"operation not permitted", "diskutil unmount: Unmount failed for /m"}},
	} {
		f := &fakeUnmount{unmount: c.unmount, programs: map[string]bool{}, out: c.out, fail: map[string]bool{}}
		for _, p := range c.programs {
			f.programs[p] = true
		}
		for _, p := range c.fail {
			f.fail[p] = true
		}
		err := unmountMount(c.goos, mnt, c.lazy, f.sys(c.root))
		if !slices.Equal(f.calls, c.calls) {
			t.Errorf("%s: calls %q, want %q", c.name, f.calls, c.calls)
		}
		if len(c.err) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.err {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q: %v", c.name, w, err)
			}
		}
		var ue usageError
		if errors.As(err, &ue) != c.usage {
			t.Errorf("%s: usage error %v, want %v", c.name, !c.usage, c.usage)
		}
		if c.goos == "darwin" && strings.Contains(strings.Join(f.calls, "\n"), "force") {
			t.Errorf("%s: kvfs forced the unmount itself: %q", c.name, f.calls)
		}
	}
}

// TestDetachHints: the messages for dead and busy mounts name the
// platform's way to detach them.
func TestDetachHints(t *testing.T) {
	if h := detachHint("linux", "/m"); h != "kvfs unmount --lazy /m" {
		t.Errorf("linux: %q", h)
	}
	if h := detachHint("darwin", "/m"); strings.Contains(h, "--lazy") || !strings.Contains(h, "diskutil unmount force /m") {
		t.Errorf("darwin: %q", h)
	}
	if h := deadMountDetach("linux", "/m"); h != "umount -l /m" {
		t.Errorf("linux: %q", h)
	}
	if h := deadMountDetach("darwin", "/m"); h != "diskutil unmount force /m" {
		t.Errorf("darwin: %q", h)
	}
}

// TestUnmountBusyWaits: on Linux a busy mount is retried every busyPoll
// for busyWait (the wait said once, on a terminal), so that a file whose
// last close is still in flight does not make the unmount fail; one that
// stays busy is refused after the wait, naming who holds it.
func TestUnmountBusyWaits(t *testing.T) {
	holders := []mountHolder{{PID: 42, Comm: "python3", How: "has open", Path: "/m/s.mlxkv"}, {PID: 43, Comm: "sh", How: "works in", Path: "/m/d"}}
	for _, c := range []struct {
		name     string
		root     bool
		busyFor  int // tries that find the mount busy
		tries    int
		sleeps   int
		err      []string
		holders  []mountHolder
		notHeard bool // nothing said: the wait is not on a terminal
	}{
		{name: "root, busy briefly", root: true, busyFor: 3, tries: 4, sleeps: 3},
		{name: "root, busy throughout", root: true, busyFor: 1000, tries: 31, sleeps: 30, holders: holders,
			err: []string{"busy (after waiting 3s)", "PID 42 (python3) has /m/s.mlxkv open", "PID 43 (sh) works in /m/d", "kvfs unmount --lazy /m"}},
		{name: "root, busy, holders unknown", root: true, busyFor: 1000, tries: 31, sleeps: 30,
			err: []string{"busy (after waiting 3s)", "fuser -vm /m", "kvfs unmount --lazy /m"}},
		{name: "root, not busy", root: true, tries: 1, notHeard: true},
		{name: "user, busy briefly", busyFor: 2, tries: 3, sleeps: 2},
		{name: "user, busy throughout", busyFor: 1000, tries: 31, sleeps: 30, holders: holders,
			err: []string{"Device or resource busy", "PID 42 (python3) has /m/s.mlxkv open", "kvfs unmount --lazy /m"}},
	} {
		tries, sleeps := 0, 0
		var said strings.Builder
		sys := unmountSys{
			root: c.root,
			unmount: func(string, int) error {
				if tries++; tries <= c.busyFor {
					return syscall.EBUSY
				}
				return nil
			},
			lookPath: func(file string) (string, error) { return "/usr/bin/" + file, nil },
			run: func(string, ...string) ([]byte, error) {
				if tries++; tries <= c.busyFor {
					return []byte("fusermount3: failed to unmount /m: Device or resource busy"), errors.New("exit status 1")
				}
				return nil, nil
			},
			busyWait: busyWait,
			sleep: func(d time.Duration) {
				if d != busyPoll {
					t.Errorf("%s: slept %v", c.name, d)
				}
				sleeps++
			},
			say:     &said,
			holders: func(mnt string) []mountHolder { return c.holders },
		}
		err := unmountMount("linux", "/m", false, sys)
		if tries != c.tries || sleeps != c.sleeps {
			t.Errorf("%s: %d tries, %d sleeps; want %d, %d", c.name, tries, sleeps, c.tries, c.sleeps)
		}
		if heard := said.String(); c.busyFor > 0 != (strings.Count(heard, "waiting up to 3s") == 1) {
			t.Errorf("%s: said %q", c.name, heard)
		}
		if len(c.err) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.err {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q: %v", c.name, w, err)
			}
		}
	}
}

// TestProcHolders: the processes holding a mount are found, in a proc
// tree, by their working and root directories, descriptors (deleted files
// too) and mapped files; others, kvfs unmount's own process and paths
// that only start like the mount point are not.
func TestProcHolders(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, comm string, links map[string]string, maps string) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644)
		for name, target := range links {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	plain := map[string]string{"cwd": "/", "root": "/"}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{"cwd": "/", "root": "/"}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	mk("10", "reader", with(map[string]string{"fd/0": "/dev/null", "fd/3": "/m/a b/s.mlxkv"}), "")
	mk("11", "sh", with(map[string]string{"cwd": "/m/d"}), "")
	mk("12", "engine", plain, "7f00-7f10 r--s 00000000 00:3a 12  /usr/lib/x.so\n7f10-7f20 r--s 00000000 00:3b 99                         /m/w eights.bin\n")
	mk("13", "gone", with(map[string]string{"fd/4": "/m/old (deleted)"}), "")
	mk("14", "other", with(map[string]string{"fd/3": "/mnt/x", "fd/4": "/m2/y", "cwd": "/mx"}), "7f-80 r-xp 0 00:01 1 /m2/z\n")
	mk("15", "self", with(map[string]string{"fd/3": "/m/self"}), "")
	mk("16", "chroot", with(map[string]string{"root": "/m"}), "")
	os.WriteFile(filepath.Join(proc, "uptime"), []byte("1 1\n"), 0o644)
	got := procHolders(proc, "/m", 15)
	want := []mountHolder{
		{10, "reader", "has open", "/m/a b/s.mlxkv"},
		{11, "sh", "works in", "/m/d"},
		{12, "engine", "maps", "/m/w eights.bin"},
		{13, "gone", "has open", "/m/old (deleted)"},
		{16, "chroot", "has its root in", "/m"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("holders:\n%+v\nwant\n%+v", got, want)
	}
	if d := describeHolders(got[:2]); d != "PID 10 (reader) has /m/a b/s.mlxkv open; PID 11 (sh) works in /m/d" {
		t.Errorf("described: %q", d)
	}
	many := make([]mountHolder, maxHoldersNamed+3)
	for i := range many {
		many[i] = mountHolder{PID: i, Comm: "x", How: "works in", Path: "/m"}
	}
	if d := describeHolders(many); !strings.HasSuffix(d, "; and 3 more") || strings.Count(d, "PID") != maxHoldersNamed {
		t.Errorf("described: %q", d)
	}
}
