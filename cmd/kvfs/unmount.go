package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
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
	// busyWait is how long a busy mount is retried (every busyPoll)
	// before it is called busy; sleep sleeps between tries.
	busyWait time.Duration
	sleep    func(time.Duration)
	// say, if not nil (a terminal), is told when the unmount waits.
	say io.Writer
	// holders lists the processes that hold the mount at mnt (nil: none
	// known).
	holders func(mnt string) []mountHolder
	// submounts lists the mount points below mnt (nil: not asked): a
	// mount in the mount keeps it busy with nothing open in it.
	submounts func(mnt string) []string
}

// A busy mount is often one whose last user has just let go: a workload
// that ends and kvfs unmount run right after it. The kernel counts a
// mount as busy while anything holds a reference to it, and some of those
// outlive the process that took them for a moment. Older kernels' FUSE
// (before "fuse: hold inode instead of path after release"; today it
// holds the inode only) held the mount until the daemon answered the
// RELEASE of a closed file, sent after close(2) has returned, which kvfs
// answers once it has committed what is left to commit. On any kernel, a
// process's mapped files are dropped by whoever drops its memory last (a
// reader of its /proc files), an io_uring's registered files by a kernel
// worker after the process is gone, a child's inherited descriptors when
// the child exits, and any lookup through the mount (a stat by fuser, df
// or a monitor) holds it while the daemon answers. So kvfs unmount
// retries a busy mount for busyWait before calling it busy, and then
// names the processes it finds holding it.
const (
	busyWait = 3 * time.Second
	busyPoll = 100 * time.Millisecond
)

// retryBusy runs try until it is not busy or busyWait has passed, saying
// (to sys.say) that it waits.
func retryBusy(mnt string, sys unmountSys, try func() (busy bool, err error)) (bool, error) {
	var waited time.Duration
	for {
		busy, err := try()
		if !busy || waited >= sys.busyWait || sys.sleep == nil {
			return busy, err
		}
		if waited == 0 && sys.say != nil {
			fmt.Fprintf(sys.say, "kvfs unmount: %s is busy; waiting up to %v for its files to be closed\n", mnt, sys.busyWait)
		}
		sys.sleep(busyPoll)
		waited += busyPoll
	}
}

// busyHolders says, for a busy mount's error, how long kvfs waited (wait:
// "" or " (after waiting 3s)") and who holds the mount at mnt after the
// wait (who: "" if none is known).
func busyHolders(mnt string, sys unmountSys) (wait, who string) {
	if sys.busyWait > 0 {
		wait = fmt.Sprintf(" (after waiting %v)", sys.busyWait)
	}
	if sys.holders != nil {
		who = describeHolders(sys.holders(mnt))
	}
	if sys.submounts != nil {
		if subs := sys.submounts(mnt); len(subs) > 0 {
			said := "mounted in it: " + strings.Join(subs, ", ") + " (unmount that first)"
			if who != "" {
				said += "; " + who
			}
			who = said
		}
	}
	return wait, who
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
		busy, err := retryBusy(mnt, sys, func() (bool, error) {
			err := sys.unmount(mnt, flags)
			return errors.Is(err, syscall.EBUSY), err
		})
		if busy {
			wait, who := busyHolders(mnt, sys)
			if who == "" {
				who = fmt.Sprintf("files in it are open or a process works in it (fuser -vm %s lists them)", mnt)
			}
			return fmt.Errorf("unmount %s: busy%s: %s; kvfs unmount --lazy %s detaches it now and lets them finish", mnt, wait, who, mnt)
		}
		if err != nil {
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
			var out []byte
			busy, err := retryBusy(mnt, sys, func() (bool, error) {
				var err error
				out, err = sys.run(p, args...)
				return err != nil && strings.Contains(string(out), "busy"), err
			})
			if err != nil {
				msg := strings.TrimSpace(string(out))
				if busy {
					wait, who := busyHolders(mnt, sys)
					if who != "" {
						who = ": " + who
					}
					msg += wait + who + "; kvfs unmount --lazy " + mnt + " detaches it now and lets open files finish"
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
