//go:build linux

package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUserMountFailureShowsCause: when fusermount3 refuses a user's mount,
// the terminal shows what it said, not only go-fuse's "fusermount exited
// with code 256" (the cause was in STORE/kvfs.log alone): here, a mount
// point the user may not write.
func TestUserMountFailureShowsCause(t *testing.T) {
	u := otherUser(t)
	openDevFuse(t)
	requireFusermount(t)
	// In the user's home: t.TempDir's parents are closed to others.
	dir, err := os.MkdirTemp(u.home, "mountfail-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil { // root's, not the user's
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "s")
	os.Mkdir(sdir, 0o755)
	os.Chown(sdir, int(u.uid), int(u.gid))
	st := filepath.Join(sdir, "store")
	u.shOK(t, kvfsBin+" init "+st)
	out, err := u.sh(kvfsBin + " mount " + st + " " + mnt)
	if err == nil {
		u.sh(kvfsBin + " unmount " + mnt)
		t.Fatalf("the user mounted on root's directory:\n%s", out)
	}
	if !strings.Contains(out, "no write access to mountpoint "+mnt) {
		t.Fatalf("the mount's error does not say fusermount3's cause:\n%s", out)
	}
}
