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
	s, err := store.Open(m.store, store.Options{LockTimeout: 10 * time.Second})
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
	// Root puts into the user's store while no daemon serves it (the
	// store opened by root itself, its first pack made by root): the
	// user's mount reads and writes the store, and the file is the
	// user's.
	big := filepath.Join(filepath.Dir(m.store), "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("root's put "), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "put", "-q", m.store, big, "offline/big")
	m.mount(t)
	mine := fmt.Sprintf("%s %d", u.name, u.gid)
	if out, err := u.sh("cmp " + big + " " + m.path("offline/big")); err != nil {
		t.Fatalf("as %s, read a file that root put while the store was unmounted: %v\n%s", u.name, err, out)
	}
	if got := statOwner(t, u, m.path("offline/big")); !strings.HasPrefix(got, mine+" ") {
		t.Errorf("offline/big put by root: %q, want the store's owner %s", got, mine)
	}
	u.shOK(t, "rm -r "+m.path("offline"))

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
	// parents it creates, belong to the store's owner — through the
	// control socket, whether the user or root runs it.
	src := filepath.Join(filepath.Dir(m.store), "src")
	u.shOK(t, "echo put data > "+src)
	u.shOK(t, fmt.Sprintf("%s put -q %s %s sub/put.txt", kvfsBin, m.store, src))
	kvfs(t, "put", "-q", m.store, src, "byroot/put.txt")
	for _, p := range []string{"sub", "sub/put.txt", "byroot", "byroot/put.txt"} {
		if got := statOwner(t, u, m.path(p)); !strings.HasPrefix(got, mine+" ") {
			t.Errorf("%s stored by kvfs put: %q, want the store's owner %s", p, got, mine)
		}
	}
	u.shOK(t, fmt.Sprintf("echo edit >> %s && rm %s && rmdir %s", m.path("byroot/put.txt"), m.path("byroot/put.txt"), m.path("byroot")))

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

// TestUserStoreServedByRoot: root mounts a user's store (an administrator
// looking in), writes into it and unmounts; the user's own mount of it
// afterwards must work: the log, the packs and the index root created stay
// the user's.
func TestUserStoreServedByRoot(t *testing.T) {
	u := otherUser(t)
	requireFusermount(t)
	openDevFuse(t)
	m := newUserStore(t, u)
	kvfs(t, "mount", m.store, m.mnt)
	if err := os.WriteFile(m.path("by-root"), []byte("written by root"), 0o644); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "unmount", m.mnt)
	out, err := exec.Command("find", m.store, "-not", "-user", u.name).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("files in %s's store not theirs after root served it: %v\n%s", u.name, err, out)
	}
	m.mount(t)
	if got := u.shOK(t, "cat "+m.path("by-root")); got != "written by root" {
		t.Fatalf("user read %q", got)
	}
	u.shOK(t, "echo mine > "+m.path("by-user"))
}
