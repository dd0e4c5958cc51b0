//go:build linux

package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

// Issue 27, "the first hour, again": what a new user meets.

// TestInitInsideMountRefused: kvfs init of a directory inside a kvfs
// mount is refused up front, naming the mount (it succeeded, and the
// store failed at its mount with a raw "bind: operation not permitted"),
// and nothing is made there.
func TestInitInsideMountRefused(t *testing.T) {
	m := newMount(t)
	for _, dir := range []string{m.mnt, m.path("sub/store")} {
		msg := kvfsFails(t, "init", dir)
		if !strings.Contains(msg, "inside the kvfs mount at "+m.mnt+" (of the store "+m.store+")") {
			t.Errorf("init %s: %s", dir, msg)
		}
	}
	if ents, _ := os.ReadDir(m.mnt); len(ents) != 0 {
		t.Errorf("a refused init left %v in the mount", ents)
	}
}

// TestMountOverStoreRefused: kvfs mount STORE STORE (or a mount point
// above the store) is refused before a daemon starts, saying why; it
// failed in the daemon at the control socket's bind, through the mount.
func TestMountOverStoreRefused(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	kvfs(t, "init", st)
	for _, mnt := range []string{st, dir} {
		msg := kvfsFails(t, "mount", st, mnt)
		if !strings.Contains(msg, "the mount would hide the store") || strings.Contains(msg, "bind") {
			t.Errorf("mount %s %s: %s", st, mnt, msg)
		}
		if isMounted(mnt) {
			t.Fatalf("%s was mounted", mnt)
		}
	}
}

// TestStatsOfOthersStore: kvfs stats of another user's store says whose
// it is, as kvfs ls does, not a raw "lstat STORE/pool.json: permission
// denied".
func TestStatsOfOthersStore(t *testing.T) {
	u := otherUser(t)
	dir, err := os.MkdirTemp("", "others-") // t.TempDir's parents are closed to others
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	st := filepath.Join(dir, "store")
	kvfs(t, "init", st)
	ls, _ := u.sh(kvfsBin + " ls " + st)
	stats, err := u.sh(kvfsBin + " stats " + st)
	want := "belongs to uid 0, not to this user"
	if !strings.Contains(ls, want) {
		t.Fatalf("kvfs ls of root's store: %s", ls)
	}
	if err == nil || !strings.Contains(stats, want) || strings.Contains(stats, "lstat") {
		t.Errorf("kvfs stats of root's store: %v: %s", err, stats)
	}
}

// TestMatchMountOfPoolMount: kvfs match --mount of a pool mount (or a
// directory in it) gives kvfs match --pool's answer through the mount's
// /.kvfs tree (it once answered a plain miss, then was refused); here a
// miss for want of any snapshot of the model, which both name.
func TestMatchMountOfPoolMount(t *testing.T) {
	env := poolEnv(t)
	mnt := poolMount(t, env, "a")
	tokens := filepath.Join(t.TempDir(), "t.json")
	os.WriteFile(tokens, []byte("[1,2,3]"), 0o600)
	args := []string{"match", "--model", "m", "--fingerprint", "f", "--tokens", tokens}
	codeP, outP, errP := poolKvfs(t, env, args...)
	code, out, errOut := poolKvfs(t, env, append(args, "--mount", mnt)...)
	if code != codeP || out != outP || !strings.Contains(out, store.MissNoModel) {
		t.Errorf("match --mount of a pool mount: exit %d: %s%s; --pool: exit %d: %s%s", code, out, errOut, codeP, outP, errP)
	}
}

// TestUserMountFusermountExitCode: when fusermount3 fails a user's
// mount, kvfs mount (in the background and with -f) prints its exit
// code, not go-fuse's wait status ("exited with code 256"), with what it
// said and the likely fix. fusermount3 is a stand-in here that fails as
// the real one does without access to /dev/fuse.
func TestUserMountFusermountExitCode(t *testing.T) {
	u := otherUser(t)
	dir, err := os.MkdirTemp(u.home, "fusermount-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	fake := "#!/bin/sh\necho 'fusermount3: failed to open /dev/fuse: Permission denied' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "fusermount3"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "w")
	os.Mkdir(work, 0o755)
	os.Chown(work, int(u.uid), int(u.gid))
	st, mnt := filepath.Join(work, "store"), filepath.Join(work, "mnt")
	u.shOK(t, kvfsBin+" init "+st+" && mkdir "+mnt)
	for _, fg := range []string{"", "-f "} {
		out, err := u.sh("PATH=" + bin + ":$PATH " + kvfsBin + " mount " + fg + st + " " + mnt)
		if err == nil {
			u.sh(kvfsBin + " unmount " + mnt)
			t.Fatalf("kvfs mount %sthrough a failing fusermount3 succeeded:\n%s", fg, out)
		}
		for _, want := range []string{"failed with exit code 1", "fusermount3: failed to open /dev/fuse: Permission denied", "ls -l /dev/fuse"} {
			if !strings.Contains(out, want) {
				t.Errorf("kvfs mount %s: the error lacks %q:\n%s", fg, want, out)
			}
		}
		if strings.Contains(out, "code 256") {
			t.Errorf("kvfs mount %s: the wait status is printed:\n%s", fg, out)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use (a process's
// output read while it runs).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestForegroundSigintBusy: SIGINT of kvfs mount -f while a file in the
// mount is open says what it waits for, naming the process and the file
// (it waited without a word); a second SIGINT detaches the mount lazily
// (the open file still reads), and the daemon exits 0 once it is closed.
func TestForegroundSigintBusy(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	st, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	kvfs(t, "init", st)
	d := exec.Command(kvfsBin, "mount", "-f", st, mnt)
	var stderr lockedBuffer
	d.Stderr = &stderr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = d.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			d.Process.Kill()
			<-exited
		}
		if isMounted(mnt) {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for start := time.Now(); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Since(start) > 15*time.Second {
				t.Fatalf("%s; the daemon said:\n%s", what, stderr.String())
			}
		}
	}
	waitUntil("not mounted", func() bool { return isMounted(mnt) })
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d.Process.Signal(os.Interrupt)
	waitUntil("no word of the busy mount after SIGINT", func() bool { return strings.Contains(stderr.String(), mnt+" is busy") })
	if s := stderr.String(); !strings.Contains(s, "has "+filepath.Join(mnt, "f")+" open") || !strings.Contains(s, "Ctrl-C again (SIGINT) detaches it now") {
		t.Errorf("the busy message does not say who holds it and what to do:\n%s", s)
	}
	if !isMounted(mnt) {
		t.Fatal("unmounted with a file open")
	}
	d.Process.Signal(os.Interrupt)
	waitUntil("not detached after a second SIGINT", func() bool { return !isMounted(mnt) })
	waitUntil("no word of the detach", func() bool { return strings.Contains(stderr.String(), "detached "+mnt) })
	b := make([]byte, 10)
	if n, err := f.ReadAt(b, 0); n != 10 || string(b) != "still here" {
		t.Errorf("the open file after the detach: %q, %v", b[:n], err)
	}
	select {
	case <-exited:
		t.Fatalf("the daemon exited with a file still open: %v", waitErr)
	case <-time.After(200 * time.Millisecond):
	}
	f.Close()
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("the daemon's exit: %v (want 0: it unmounted as asked)\n%s", waitErr, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the daemon did not exit once the file was closed:\n%s", stderr.String())
	}
}

// TestForegroundSigintWhileMounting: SIGINT that comes while kvfs mount
// -f opens its store and mounts (here: as soon as it has logged its
// descriptor limit, its first line) stops it cleanly once the mount is
// up: exit 0, nothing left mounted. It killed the daemon there, leaving a
// dead mount (CI met it: TestForegroundSigintBusy's SIGINT came before
// the handler on a loaded machine).
func TestForegroundSigintWhileMounting(t *testing.T) {
	requireRoot(t)
	for i := range 3 {
		dir := t.TempDir()
		st, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
		os.Mkdir(mnt, 0o755)
		kvfs(t, "init", st)
		d := exec.Command(kvfsBin, "mount", "-f", st, mnt)
		var stderr lockedBuffer
		d.Stderr = &stderr
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); !strings.Contains(stderr.String(), "file descriptors"); time.Sleep(time.Millisecond) {
			if time.Since(start) > 15*time.Second {
				d.Process.Kill()
				t.Fatalf("round %d: no first line from the daemon:\n%s", i, stderr.String())
			}
		}
		d.Process.Signal(os.Interrupt)
		exited := make(chan error, 1)
		go func() { exited <- d.Wait() }()
		var err error
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			d.Process.Kill()
			syscall.Unmount(mnt, syscall.MNT_DETACH)
			t.Fatalf("round %d: the daemon did not exit within 30 s of SIGINT while mounting:\n%s", i, stderr.String())
		}
		if isMounted(mnt) {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
			t.Errorf("round %d: left mounted", i)
		}
		if err != nil {
			t.Fatalf("round %d: SIGINT while mounting: %v\n%s", i, err, stderr.String())
		}
	}
}
