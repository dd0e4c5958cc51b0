package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
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
