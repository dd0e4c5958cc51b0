package main

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// checkMountTarget checks, before a daemon starts, what would otherwise
// fail in its log or, worse, succeed: storeDir must be a store this user
// can read and not mounted already; mnt must be a directory that is not a
// live kvfs mount (a second mount over it would hide the first). A dead
// kvfs mount at mnt (its daemon was killed: "transport endpoint is not
// connected") is detached when root, with a line saying so; others are
// told what to run.
func checkMountTarget(storeDir, mnt string, stderr io.Writer) error {
	if err := notAStore(storeDir); err != nil {
		return err
	}
	// A mount over the store (STORE = MOUNTPOINT) or over a directory
	// above it would hide the store from its own daemon: it failed at the
	// control socket's bind ("operation not permitted"), through itself.
	if s, serr := resolveExisting(storeDir); serr == nil {
		if m, merr := resolveExisting(mnt); merr == nil && pathUnder(s, m) {
			what := "inside the mount point"
			if s == m {
				what = "the mount point too"
			}
			return fmt.Errorf("store %s is %s %s: the mount would hide the store from its own daemon; mount it on another directory (the default: kvfs mount with no paths)", storeDir, what, mnt)
		}
	}
	for _, e := range storeMounts(storeDir) {
		if !deadMount(e.Point) { // a dead one holds the store no more
			return fmt.Errorf("store %s is already mounted at %s (one daemon serves a store; unmount it first: kvfs unmount %s)", storeDir, e.Point, e.Point)
		}
	}
	if e, ok, _ := mountAt(mnt); ok && e.isKvfs() {
		if !deadMount(mnt) {
			return fmt.Errorf("mount point %s is already a kvfs mount of %s (mounting over it would hide it; kvfs unmount %s first)", mnt, e.Source, mnt)
		}
		// On macOS the mount's owner may force its unmount too.
		if os.Geteuid() != 0 && runtime.GOOS != "darwin" {
			return fmt.Errorf("mount point %s is a dead kvfs mount of %s (its daemon exited); detach it first: %s", mnt, e.Source, detachHint(runtime.GOOS, mnt))
		}
		if err := syscall.Unmount(mnt, detachFlag); err != nil {
			return fmt.Errorf("mount point %s is a dead kvfs mount; detaching it: %w", mnt, err)
		}
		fmt.Fprintf(stderr, "kvfs mount: %s was a dead kvfs mount of %s (its daemon exited); detached it\n", mnt, e.Source)
	}
	fi, err := os.Stat(mnt)
	switch {
	case isDeadMount(err):
		return fmt.Errorf("mount point %s: %w (a FUSE mount whose daemon is gone; detach it with: %s)", mnt, err, deadMountDetach(runtime.GOOS, mnt))
	case errors.Is(err, iofs.ErrNotExist):
		return fmt.Errorf("mount point %s does not exist (create it: mkdir -p %s)", mnt, mnt)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", mnt, err)
	case !fi.IsDir():
		return fmt.Errorf("mount point %s is not a directory", mnt)
	}
	return nil
}

// notAStore says why dir holds no store this user can open, or returns
// nil: one message for every command that takes a STORE, naming what dir
// is instead and what to run.
func notAStore(dir string) error {
	_, err := os.Stat(filepath.Join(dir, "kvfs.db"))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, iofs.ErrPermission):
		return fmt.Errorf("store %s: permission denied: the store belongs to another user (%s); use it as that user", dir, ownerOf(dir))
	case errors.Is(err, iofs.ErrNotExist):
		if e, ok, _ := mountAt(dir); ok && e.Source == poolFsName {
			return fmt.Errorf("%s is a pool's mount point (kvfs mount --pool), not a store (use the mount itself, with ls, cp, ..., or kvfs pool)", dir)
		} else if ok && e.isKvfs() {
			// Not "run kvfs init": that would make a store inside the mount.
			return fmt.Errorf("%s is a kvfs mount point (of the store %s), not a store (give the store, or use the mount itself, with ls, cp, ...)", dir, e.Source)
		}
		if _, err := os.Lstat(filepath.Join(dir, poolConfigFile)); err == nil {
			return fmt.Errorf("%s is a pool mount's directory (kvfs mount --pool: its cache and spool), not a store (kvfs stats %s describes the pool)", dir, dir)
		}
		return fmt.Errorf("%s is not a kvfs store (create one with: kvfs init %s)", dir, dir)
	default:
		return fmt.Errorf("store %s: %w", dir, err)
	}
}

// deadMount reports whether the FUSE mount at mnt has lost its daemon.
// statfs is asked, not stat: the kernel answers a stat of the mount's
// root from its attribute cache without asking the (dead) daemon, but
// always passes statfs on.
// A daemon that is alive but stuck does not answer: after a few seconds
// the mount is taken as live (it may still come back).
func deadMount(mnt string) bool {
	done := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		done <- syscall.Statfs(mnt, &st)
	}()
	select {
	case err := <-done:
		return isDeadMount(err)
	case <-time.After(3 * time.Second):
		return false
	}
}

// ownerOf names the owner of path, for messages.
func ownerOf(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "owner unknown"
	}
	return fmt.Sprintf("uid %d", st.Uid)
}
