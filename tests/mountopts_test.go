//go:build linux

package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMountFstabOptions: the options an fstab line carries for mount(8)
// and systemd (nofail, _netdev, x-systemd.*, comment=) are accepted and
// ignored, through mount(8)'s helper too; ro and noexec reach the kernel:
// the mount is read-only (EROFS for every change, reads as before) and
// mountinfo shows both. Before, kvfs refused every one of them.
func TestMountFstabOptions(t *testing.T) {
	m := newMount(t)
	if err := os.WriteFile(m.path("f"), []byte("written before ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	cmd := exec.Command("../contrib/mount.fuse.kvfs", m.store, m.mnt, "-o",
		"ro,noexec,nofail,_netdev,x-systemd.automount,x-systemd.device-timeout=10s,comment=kvfs,compact_interval=0,capacity=1G")
	cmd.Env = append(os.Environ(), "KVFS="+kvfsBin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount.fuse.kvfs: %v\n%s", err, out)
	}
	if !isMounted(m.mnt) {
		t.Fatal("not mounted")
	}
	info, _ := os.ReadFile("/proc/self/mountinfo")
	var line string
	for _, l := range strings.Split(string(info), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == m.mnt {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 6 || !strings.Contains(","+f[5]+",", ",ro,") || !strings.Contains(f[5], "noexec") {
		t.Errorf("mountinfo of a ro,noexec mount: %q", line)
	}
	if b, err := os.ReadFile(m.path("f")); err != nil || string(b) != "written before ro" {
		t.Fatalf("read on a ro mount: %q, %v", b, err)
	}
	for what, err := range map[string]error{
		"create":   os.WriteFile(m.path("g"), []byte("x"), 0o644),
		"write":    os.WriteFile(m.path("f"), []byte("x"), 0o644),
		"remove":   os.Remove(m.path("f")),
		"mkdir":    os.Mkdir(m.path("d"), 0o755),
		"chmod":    os.Chmod(m.path("f"), 0o600),
		"rename":   os.Rename(m.path("f"), m.path("h")),
		"truncate": os.Truncate(m.path("f"), 0),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a ro mount: %v, want EROFS", what, err)
		}
	}
	if err := exec.Command(m.path("f")).Run(); !errors.Is(err, syscall.EACCES) {
		t.Errorf("exec on a noexec mount: %v, want EACCES", err)
	}
	if out := sh(t, "ps -eo args | grep '[k]vfs mount --foreground.*"+m.store+"'"); !strings.Contains(out, "--compact-interval 0s") || !strings.Contains(out, "--capacity") {
		t.Errorf("daemon arguments from the helper's options: %s", out)
	}
	for _, bad := range []string{"sync", "bogus", "ro,nonsense=1"} {
		out, err := exec.Command(kvfsBin, "mount", "-o", bad, m.store, filepath.Join(t.TempDir())).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "unknown mount option") {
			t.Errorf("-o %s: %v\n%s", bad, err, out)
		}
	}
}

// TestDirectoryXattrs: what listxattr shows is what getxattr reads: a
// directory lists no user.kvfs.* attribute and reads none (ENODATA, not
// ESTALE or an empty value), a file lists them and reads each.
func TestDirectoryXattrs(t *testing.T) {
	m := newMount(t)
	os.Mkdir(m.path("d"), 0o755)
	os.WriteFile(m.path("d/f"), []byte("hello"), 0o644)
	for _, p := range []string{m.path("d"), m.mnt} {
		sz, err := syscall.Listxattr(p, nil)
		if err != nil || sz != 0 {
			t.Errorf("listxattr %s: %d bytes, %v; want none", p, sz, err)
		}
		for _, name := range []string{"user.kvfs.kind", "user.kvfs.stored_bytes", "user.kvfs.shared_bytes", "user.kvfs.logical_bytes", "user.kvfs.manifest", "user.kvfs.tokens"} {
			if v, err := getxattr(p, name); err != syscall.ENODATA {
				t.Errorf("getxattr %s %s: %q, %v; want ENODATA", p, name, v, err)
			}
		}
	}
	buf := make([]byte, 4096)
	n, err := syscall.Listxattr(m.path("d/f"), buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if _, err := getxattr(m.path("d/f"), name); err != nil {
			t.Errorf("listed %s, but getxattr: %v", name, err)
		}
	}
}

// TestStatsFileAttrs: /.kvfs/stats shows the size of what a read returns
// (it said 0), a link count and a current time, as ls -l shows them.
func TestStatsFileAttrs(t *testing.T) {
	m := newMount(t)
	os.WriteFile(m.path("f"), []byte("x"), 0o644)
	fi, err := os.Stat(m.path(".kvfs/stats"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Size() == 0 || fi.Size() != int64(len(b)) || st.Nlink != 1 || fi.ModTime().Year() < 2020 {
		t.Fatalf("/.kvfs/stats: size %d (reads %d bytes), nlink %d, mtime %v", fi.Size(), len(b), st.Nlink, fi.ModTime())
	}
}
