package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// kvfs unmount's decisions, per platform, untagged so that both are tested
// on any machine (unmount_test.go); what it does to the system is
// injected (unmountSys).
//
// Linux detaches a busy mount lazily on request (--lazy: MNT_DETACH, or
// fusermount3 -z). macOS has no lazy unmount: kvfs asks for the plain
// unmount that go-fuse's own Server.Unmount makes there (unmount(2) with
// no flags; the owner of a macFUSE mount may make it), then diskutil,
// which also asks the processes that hold the volume (Spotlight, Finder)
// to let go, and when the mount is still busy says how to force it,
// without forcing it itself: a forced unmount fails the engine's open
// files.

// unmountSys is what kvfs unmount does to the system.
type unmountSys struct {
	root     bool                                              // running as root
	unmount  func(mnt string, flags int) error                 // unmount(2)
	lookPath func(file string) (string, error)                 // exec.LookPath
	run      func(name string, args ...string) ([]byte, error) // a program's combined output
}

// diskutil is macOS's disk tool, by its full path: a launchd agent's PATH
// may lack /usr/sbin.
const diskutil = "/usr/sbin/diskutil"

// unmountMount unmounts the kvfs mount at mnt (an absolute mount point
// from the mount table) on goos; lazy is --lazy.
func unmountMount(goos, mnt string, lazy bool, sys unmountSys) error {
	if goos == "darwin" {
		return unmountMac(mnt, lazy, sys)
	}
	if sys.root {
		flags := 0
		if lazy {
			flags = detachFlag
		}
		if err := sys.unmount(mnt, flags); err != nil {
			if errors.Is(err, syscall.EBUSY) {
				return fmt.Errorf("unmount %s: busy: files in it are open or a process works in it (fuser -vm %s lists them); kvfs unmount --lazy %s detaches it now and lets them finish", mnt, mnt, mnt)
			}
			return &os.PathError{Op: "unmount", Path: mnt, Err: err}
		}
		return nil
	}
	args := []string{"-u", mnt}
	if lazy {
		args = []string{"-u", "-z", mnt}
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if p, err := sys.lookPath(bin); err == nil {
			out, err := sys.run(p, args...)
			if err != nil {
				msg := strings.TrimSpace(string(out))
				if strings.Contains(msg, "busy") {
					msg += "; kvfs unmount --lazy " + mnt + " detaches it now and lets open files finish"
				}
				return fmt.Errorf("unmount %s: %s", mnt, msg)
			}
			return nil
		}
	}
	return fmt.Errorf("unmount %s: not root and no fusermount3 (apt-get install fuse3)", mnt)
}

// unmountMac is unmountMount on macOS.
func unmountMac(mnt string, lazy bool, sys unmountSys) error {
	if lazy {
		return usagef("unmount %s: --lazy is not supported on macOS, which has no lazy unmount; close what uses the mount and run kvfs unmount %s again, or force it (open files then fail): %s unmount force %s", mnt, mnt, diskutil, mnt)
	}
	uerr := sys.unmount(mnt, 0)
	if uerr == nil {
		return nil
	}
	out, derr := sys.run(diskutil, "unmount", mnt)
	if derr == nil {
		return nil
	}
	said := strings.TrimSpace(string(out))
	if said == "" {
		said = derr.Error()
	}
	if errors.Is(uerr, syscall.EBUSY) || strings.Contains(said, "busy") || strings.Contains(said, "dissent") {
		return fmt.Errorf("unmount %s: busy: files in it are open or a process works in it (lsof +f -- %s lists them; diskutil: %s); close them and run kvfs unmount %s again, or force it (open files then fail): diskutil unmount force %s", mnt, mnt, said, mnt, mnt)
	}
	return fmt.Errorf("unmount %s: %w; diskutil unmount: %s", mnt, uerr, said)
}

// detachHint says how to detach the dead or busy kvfs mount at mnt on
// goos, for messages.
func detachHint(goos, mnt string) string {
	if goos == "darwin" {
		return "kvfs unmount " + mnt + " (if it stays busy: diskutil unmount force " + mnt + ")"
	}
	return "kvfs unmount --lazy " + mnt
}

// deadMountDetach says how to detach a FUSE mount at mnt whose daemon is
// gone and that may not be kvfs's (kvfs unmount takes only its own).
func deadMountDetach(goos, mnt string) string {
	if goos == "darwin" {
		return "diskutil unmount force " + mnt
	}
	return "umount -l " + mnt
}
