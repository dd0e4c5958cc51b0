package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/store"
)

// TestInitOwner: kvfs init records who runs it as the store's owner, or
// the owner given with --owner, to whom the store's files then belong
// (root initialising a store for a user).
func TestInitOwner(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	mustRun(t, "init", st)
	s, err := store.Open(st, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Owner() != store.ProcessOwner() {
		t.Errorf("owner %v, want the process's %v", s.Owner(), store.ProcessOwner())
	}
	s.Close()

	for _, bad := range []string{"1234", "a:b", "1:", ":1", "1:2:3", "-1:2"} {
		if code, _, _ := runCmd("init", "--owner", bad, filepath.Join(dir, "bad")); code != exitUsage {
			t.Errorf("init --owner %q: exit %d, want %d", bad, code, exitUsage)
		}
	}

	want := store.Owner{UID: 1234, GID: 5678}
	if os.Geteuid() != 0 {
		want = store.ProcessOwner() // only root gives files away
	}
	st = filepath.Join(dir, "given")
	mustRun(t, "init", "--owner", formatOwner(want), st)
	for _, p := range []string{st, filepath.Join(st, "kvfs.db"), filepath.Join(st, "packs")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if sys := fi.Sys().(*syscall.Stat_t); sys.Uid != want.UID || sys.Gid != want.GID {
			t.Errorf("%s owned by %d:%d, want %v", p, sys.Uid, sys.Gid, want)
		}
	}
	s, err = store.Open(st, store.Options{AnyOwner: !ownedByMe(st)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Owner() != want {
		t.Errorf("owner %v, want %v", s.Owner(), want)
	}
	root, err := s.StatIno(1)
	if err != nil {
		t.Fatal(err)
	}
	if root.UID != want.UID || root.GID != want.GID {
		t.Errorf("root directory owned by %d:%d, want %v", root.UID, root.GID, want)
	}
}

func formatOwner(o store.Owner) string {
	return fmt.Sprintf("%d:%d", o.UID, o.GID)
}

func ownedByMe(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Sys().(*syscall.Stat_t).Uid == uint32(os.Geteuid())
}

// TestParseOwnerNames: init --owner takes user and group names as well as
// numbers, and a user alone stands for the user and their primary group.
func TestParseOwnerNames(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	g, err := user.LookupGroupId(me.Gid)
	if err != nil {
		t.Skip(err)
	}
	uid, _ := strconv.ParseUint(me.Uid, 10, 32)
	gid, _ := strconv.ParseUint(me.Gid, 10, 32)
	want := store.Owner{UID: uint32(uid), GID: uint32(gid)}
	for _, s := range []string{me.Username, me.Username + ":" + g.Name, me.Uid + ":" + g.Name, me.Username + ":" + me.Gid, me.Uid} {
		if got, err := parseOwner(s); err != nil || got != want {
			t.Errorf("parseOwner(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"no-such-user-kvfs:1", "1:no-such-group-kvfs", me.Username + ":", ""} {
		if got, err := parseOwner(s); err == nil {
			t.Errorf("parseOwner(%q) = %v, want an error", s, got)
		}
	}
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", "--owner", me.Username+":"+g.Name, st)
}
