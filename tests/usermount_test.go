//go:build linux

package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

// A user's own mount: an ordinary user (fuse3 installed, /dev/fuse open to
// them as udev makes it) initialises a store, mounts it through
// fusermount3, works in it, and unmounts it. CI runs as root: the tests
// act as otherUser and open /dev/fuse to them for the test's duration.

func init() {
	// blockfile DIR: store a block as the engine does (FORMAT.md §4):
	// blocks/<h>.tmp (0600, truncated), write, fsync, close, rename to
	// blocks/<h>; then read it back.
	clients["blockfile"] = func(args []string) error {
		blocks := filepath.Join(args[0], "blocks")
		if err := os.MkdirAll(blocks, 0o700); err != nil {
			return err
		}
		data := bytes.Repeat([]byte("user's block "), 5000)
		sum := sha256.Sum256(data)
		h := hex.EncodeToString(sum[:])
		tmp := filepath.Join(blocks, h+".tmp")
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(blocks, h)); err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(blocks, h))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("block %s read back %d bytes, not the %d written", h, len(got), len(data))
		}
		return nil
	}
}

// requireFusermount fails the test unless fusermount3 is installed
// setuid root, as the fuse3 package installs it (scripts/setup does).
func requireFusermount(t testing.TB) {
	t.Helper()
	p, err := exec.LookPath("fusermount3")
	if err != nil {
		t.Fatal("fusermount3 is missing: ordinary users mount through it; install fuse3 (scripts/setup does)")
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSetuid == 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("%s is not setuid root (%v): ordinary users cannot mount through it", p, fi.Mode())
	}
}

// openDevFuse makes /dev/fuse usable by every user, as udev does on a
// desktop system, and restores its mode when the test ends (pass or
// fail): the change is global.
func openDevFuse(t testing.TB) {
	t.Helper()
	fi, err := os.Stat("/dev/fuse")
	if err != nil {
		t.Fatalf("/dev/fuse: %v", err)
	}
	mode := fi.Mode().Perm()
	if err := os.Chmod("/dev/fuse", 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Chmod("/dev/fuse", mode); err != nil {
			t.Errorf("restore the mode of /dev/fuse to %v: %v", mode, err)
		}
	})
}

// setFuseConf replaces /etc/fuse.conf with content until the test ends.
func setFuseConf(t testing.TB, content string) {
	t.Helper()
	const conf = "/etc/fuse.conf"
	old, err := os.ReadFile(conf)
	existed := err == nil
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		if existed {
			err = os.WriteFile(conf, old, 0o644)
		} else {
			err = os.Remove(conf)
		}
		if err != nil {
			t.Errorf("restore %s: %v", conf, err)
		}
	})
	if err := os.WriteFile(conf, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// userMount is a store that u owns, and its mount point, both in a
// directory of u's home.
type userMount struct {
	u          testUser
	store, mnt string
}

// newUserStore makes a directory for u in u's home (removed at the end)
// and, as u, a store and a mount point in it.
func newUserStore(t testing.TB, u testUser) *userMount {
	t.Helper()
	dir, err := os.MkdirTemp(u.home, "usermount-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(u.uid), int(u.gid)); err != nil {
		t.Fatal(err)
	}
	m := &userMount{u: u, store: filepath.Join(dir, "store"), mnt: filepath.Join(dir, "mnt")}
	u.shOK(t, "mkdir "+m.mnt)
	u.shOK(t, kvfsBin+" init "+m.store)
	return m
}

// mount mounts the store as u; at the end, a mount still there is taken
// down (by root: the test has failed) and the store is checked.
func (m *userMount) mount(t testing.TB, args ...string) {
	t.Helper()
	m.u.shOK(t, kvfsBin+" mount "+strings.Join(args, " ")+" "+m.store+" "+m.mnt)
	if !isMounted(m.mnt) {
		t.Fatalf("kvfs mount as %s returned but %s is not in mountinfo", m.u.name, m.mnt)
	}
	t.Cleanup(func() {
		if isMounted(m.mnt) {
			if out, err := m.u.sh(kvfsBin + " unmount " + m.mnt); err != nil {
				t.Errorf("unmount as %s: %v\n%s", m.u.name, err, out)
				syscall.Unmount(m.mnt, syscall.MNT_DETACH)
			}
		}
		m.check(t)
	})
}

// check opens the store as root once the daemon has let go of it and
// checks its invariants.
func (m *userMount) check(t testing.TB) {
	t.Helper()
	s, err := store.Open(m.store, store.Options{LockTimeout: 10 * time.Second, AnyOwner: true})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
		t.Fatalf("open store after unmount: %v\ndaemon log:\n%s", err, log)
	}
	defer s.Close()
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Error(err)
	}
}

func (m *userMount) path(p string) string { return filepath.Join(m.mnt, p) }

// statOwner is "user group mode" of p, by stat(1) as u.
func statOwner(t testing.TB, u testUser, p string) string {
	t.Helper()
	return strings.TrimSpace(u.shOK(t, "stat -c '%U %g %a' "+p))
}

// TestUserMount: an ordinary user mounts their own store through
// fusermount3 and may do in it what they may do in their home: the root
// and what kvfs put stores are theirs; create, write, rename, remove,
// mkdir, rmdir and the engine's blocks protocol work as that user; kvfs
// unmount as that user unmounts; the store is sound afterwards.
func TestUserMount(t *testing.T) {
	u := otherUser(t)
	requireFusermount(t)
	openDevFuse(t)
	m := newUserStore(t, u)
	m.mount(t)
	mine := fmt.Sprintf("%s %d", u.name, u.gid)
	if got := statOwner(t, u, m.mnt); got != mine+" 755" {
		t.Fatalf("mount root is %q, want %q", got, mine+" 755")
	}
	// Files and directories, through the mount, as the user.
	if got := u.shOK(t, fmt.Sprintf("cd %s && echo hello > f && echo more >> f && cat f", m.mnt)); got != "hello\nmore\n" {
		t.Fatalf("read back %q", got)
	}
	if got := statOwner(t, u, m.path("f")); !strings.HasPrefix(got, mine+" ") {
		t.Fatalf("file created by %s: %q", u.name, got)
	}
	u.shOK(t, fmt.Sprintf("cd %s && mv f g && test ! -e f && test \"$(cat g)\" = \"$(printf 'hello\\nmore')\" && rm g && test ! -e g", m.mnt))
	u.shOK(t, fmt.Sprintf("cd %s && mkdir d && mkdir d/e && echo x > d/e/x && rm d/e/x && rmdir d/e && rmdir d && test ! -e d", m.mnt))
	if got := u.shOK(t, "ls -A "+m.mnt); got != "" {
		t.Fatalf("mount not empty after removals: %q", got)
	}

	// The engine's protocol, as the user: a block by hand, then whole
	// snapshots in the blocks layout, read back and verified.
	ns := m.path("engine")
	u.shOK(t, "mkdir "+ns)
	if out, err := u.client(t, "blockfile", ns).CombinedOutput(); err != nil {
		t.Fatalf("blockfile as %s: %v\n%s", u.name, err, out)
	}
	for _, n := range []string{"200", "300"} {
		if out, err := u.client(t, "engine", ns, "blocks", n).CombinedOutput(); err != nil {
			t.Fatalf("engine as %s: %v\n%s", u.name, err, out)
		}
		out := u.shOK(t, kvfsBin+" inspect --verify "+filepath.Join(ns, "snap-"+n+".mlxkv"))
		if !strings.Contains(out, "verify:       ok") || !strings.Contains(out, "tokens:       "+n) {
			t.Fatalf("inspect as %s: %s", u.name, out)
		}
	}

	// kvfs put has no calling user in the mount: what it stores, and the
	// parents it creates, belong to the store's owner.
	src := filepath.Join(filepath.Dir(m.store), "src")
	u.shOK(t, "echo put data > "+src)
	u.shOK(t, fmt.Sprintf("%s put -q %s %s sub/put.txt", kvfsBin, m.store, src))
	for _, p := range []string{"sub", "sub/put.txt"} {
		if got := statOwner(t, u, m.path(p)); !strings.HasPrefix(got, mine+" ") {
			t.Errorf("%s stored by kvfs put: %q, want the store's owner %s", p, got, mine)
		}
	}
	u.shOK(t, fmt.Sprintf("echo edit >> %s && rm %s && rmdir %s", m.path("sub/put.txt"), m.path("sub/put.txt"), m.path("sub")))

	// Unmount as the user, through fusermount3.
	u.shOK(t, kvfsBin+" unmount "+m.mnt)
	if isMounted(m.mnt) {
		t.Fatalf("%s still mounted after kvfs unmount as %s", m.mnt, u.name)
	}
}

// TestUserMountAllowOther: a user's mount with -o allow_other needs
// user_allow_other in /etc/fuse.conf (the error says so); with it, other
// users get what the modes give them, and no more.
func TestUserMountAllowOther(t *testing.T) {
	u := otherUser(t)
	requireFusermount(t)
	openDevFuse(t)
	m := newUserStore(t, u)

	setFuseConf(t, "# kvfs test: no user_allow_other\n")
	out, err := u.sh(kvfsBin + " mount -o allow_other " + m.store + " " + m.mnt)
	if err == nil || !strings.Contains(out, "fuse.conf") {
		if isMounted(m.mnt) {
			syscall.Unmount(m.mnt, syscall.MNT_DETACH)
		}
		t.Fatalf("mount -o allow_other by a user without user_allow_other: %v, want an error naming fuse.conf:\n%s", err, out)
	}

	setFuseConf(t, "user_allow_other\n")
	m.mount(t, "-o", "allow_other")
	// The directories above the mount point are the user's home's: let
	// others through to it.
	for d := filepath.Dir(m.mnt); d != filepath.Dir(u.home); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(d, fi.Mode().Perm()) })
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	u.shOK(t, fmt.Sprintf("cd %s && echo public > pub && chmod 644 pub && echo secret > priv && chmod 600 priv", m.mnt))
	// nobody: another ordinary user.
	nobody := testUser{name: "nobody", uid: 65534, gid: 65534, home: "/"}
	if got := nobody.shOK(t, "cat "+m.path("pub")); got != "public\n" {
		t.Fatalf("another user read %q", got)
	}
	if out, err := nobody.sh("cat " + m.path("priv")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("another user read a 0600 file of %s's: %v %q", u.name, err, out)
	}
	if out, err := nobody.sh("touch " + m.path("theirs")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("another user created a file in %s's 0755 mount root: %v %q", u.name, err, out)
	}
	u.shOK(t, kvfsBin+" unmount "+m.mnt)
}

// TestForeignStoreRefused: kvfs, run by root, refuses a user's store —
// mount, put (offline and through the user's daemon's socket), stats, ls —
// because the user may have planted links in it that lead to root's files:
// the log, the spool, the reserve and a pack here. The links' targets stay
// as they were, and the error names the owner.
func TestForeignStoreRefused(t *testing.T) {
	u := otherUser(t)
	requireFusermount(t)
	openDevFuse(t)
	m := newUserStore(t, u)
	victims := t.TempDir() // root's
	file := func(name string) string {
		p := filepath.Join(victims, name)
		if err := os.WriteFile(p, []byte("root's "+name), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir := filepath.Join(victims, "dir")
	os.Mkdir(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "keep"), []byte("root's keep"), 0o600)
	u.shOK(t, fmt.Sprintf("cd %s && ln -sf %s kvfs.log && rm -rf spool && ln -s %s spool && rm -f reserve && ln -s %s reserve",
		m.store, file("log"), dir, file("reserve")))
	src := filepath.Join(victims, "src")
	os.WriteFile(src, []byte("data"), 0o644)
	refused := func(args ...string) {
		t.Helper()
		out, err := exec.Command(kvfsBin, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), fmt.Sprintf("belongs to uid %d", u.uid)) {
			t.Errorf("kvfs %s as root on %s's store: %v, want a refusal naming uid %d:\n%s", strings.Join(args, " "), u.name, err, u.uid, out)
		}
	}
	refused("mount", m.store, m.mnt)
	if isMounted(m.mnt) {
		syscall.Unmount(m.mnt, syscall.MNT_DETACH)
	}
	refused("put", m.store, src, "x")
	refused("stats", m.store)
	refused("ls", m.store, "/")
	// With the user's daemon serving it, root's put would go through a
	// socket the user named: refused as well.
	u.shOK(t, fmt.Sprintf("cd %s && rm kvfs.log spool reserve && mkdir -m 700 spool", m.store))
	m.mount(t)
	refused("put", m.store, src, "x")
	for name, want := range map[string]string{"log": "root's log", "reserve": "root's reserve", "dir/keep": "root's keep"} {
		b, err := os.ReadFile(filepath.Join(victims, name))
		if err != nil || string(b) != want {
			t.Errorf("root's %s after kvfs ran on the user's store: %q, %v", name, b, err)
		}
		fi, _ := os.Stat(filepath.Join(victims, name))
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
			t.Errorf("root's %s now belongs to uid %d", name, st.Uid)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("root's directory behind the spool link holds %d entries, want its 1", len(ents))
	}
}
