package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kvfs/kvfs/gc"
)

// exitStatus is an error that carries its own exit code: a command whose
// outcome is a status more than a failure (fsck). Its message, if any, is
// printed as an error's.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e exitStatus) Unwrap() error { return e.err }

func runFsck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("fsck", "[--verify] [--repair] STORE", `Check a store: recompute every chunk's refcount from the manifests, check
that every chunk lies inside its pack and is not punched out, that every
pack has its committed length, and the blob records, names and attributes.
Each problem names the chunk, its pack and offset, and the files (with file
offsets) that list it.

When the store is mounted, the daemon checks it (through its control
socket, STORE/kvfs.sock) while it serves: writes, removals, eviction go on
(background compaction waits), and a problem is reported only when a
second look finds it again, so a write in flight is not mistaken for one.
--verify works the same there, with the progress line. --repair is refused
on a mounted store (exit 8): it rewrites refcounts and manifests in one
sweep that live writes would race; unmount and run it offline.

With --repair, refcounts and pack records are set to what the manifests and
the pack files say; chunks whose bytes are gone are dropped, and the files
that listed them are marked damaged there: those byte ranges read as EIO
through a mount (the rest of the file reads as before), and the extended
attribute user.kvfs.damaged lists them ("START-END,...", END exclusive).
Later runs report marked damage until the file is removed or rewritten.

Exit status:
  0  clean
  1  problems found, not repaired (run again with --repair)
  2  bad command line
  3  damage that cannot be repaired: files with lost bytes (marked damaged),
     or a problem --repair could not fix
  4  interrupted by SIGINT or SIGTERM
  5  problems found and all repaired, no byte lost
  8  fsck could not run: the store is unreadable, its daemon does not
     answer, or --repair was asked of a mounted store`)
	verify := fs.Bool("verify", false, "also read every chunk and check its sha256 (packs are read front to back, at disk speed; a progress line on a terminal's stderr)")
	repair := fs.Bool("repair", false, "fix refcounts and pack records, drop lost chunks and mark the files that lost bytes damaged")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want STORE")
	}
	opts := gc.FsckOptions{Verify: *verify, Repair: *repair}
	var bar *progress
	if *verify {
		bar = newProgress(stderr, "verify", 0, 1)
		opts.Progress = bar.update
		// The results start lines of their own, not the bar's.
		stdout = bar.above(stdout)
	}
	code, err := fsckMounted(ctx, fs.Arg(0), opts, stdout)
	if err == errNotMounted {
		if err = notAStore(fs.Arg(0)); err != nil {
			code = gc.StatusFailed
		} else {
			code, err = gc.Fsck(ctx, fs.Arg(0), opts, stdout)
			err = inUseBy(fs.Arg(0), err)
		}
	}
	bar.done()
	if err != nil && ctx.Err() != nil {
		return err // exitCanceled
	}
	if code == gc.StatusClean && err == nil {
		return nil
	}
	return exitStatus{code: code, err: err}
}
