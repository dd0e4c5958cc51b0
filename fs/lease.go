package fs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/kvfs/kvfs/store"
)

// viewLease is how long a view's lookup holds the version of the original
// it found. The kernel opens a name in two requests, a lookup and then an
// open of the node the lookup returned; an original replaced in between
// (the engine's write-then-rename) would be gone by the open, which then
// fails with ESTALE. The kernel retries the walk once, but a writer
// replacing the original in a loop can beat the retry too: CI saw a
// reader's open of a prefix view fail so, on one thread (GOMAXPROCS=1).
// Held a moment, the version is still there for the open, which reads it
// whole, as an open on a disk racing a rename reads the file it found.
const viewLease = time.Second

// lease holds version ino for viewLease, as an open file does: the
// evictor passes over it, and if its name goes meanwhile it stays, as an
// orphan, until the lease ends. It fails if the version is gone already.
func (fsys *FS) lease(ino uint64) error {
	if err := fsys.s.Hold(ino); err != nil {
		return err
	}
	time.AfterFunc(viewLease, func() {
		if fsys.s.Closed() {
			return // the store's next open releases what is orphaned
		}
		if err := fsys.s.Unhold(ino); err != nil {
			fsys.log.Warn("release a view's lookup lease", "ino", ino, "err", err)
		}
	})
	return nil
}

// lookupLeased looks name up in directory dir and, if ctx's caller may
// open the file version it names, leases it (lease): one who may not
// would hold the file against the evictor by looking it up in a loop (red
// team). A directory is returned as it is. A version replaced between
// the lookup and the lease is looked up again, a few times, and then
// given up as stale: the kernel retries.
func (fsys *FS) lookupLeased(ctx context.Context, dir uint64, name string) (*store.FileInfo, error) {
	var err error
	for range 3 {
		var fi *store.FileInfo
		if fi, err = fsys.s.Lookup(dir, name); err != nil || fi.IsDir() {
			return fi, err
		}
		if fsys.s.MayOpen(fi.Ino, cred(ctx)) != nil {
			return fi, nil
		}
		if err = fsys.lease(fi.Ino); err == nil {
			return fi, nil
		}
	}
	return nil, &goneError{err}
}

// lookupErrno maps an error of lookupLeased: ESTALE for a version that
// kept going, as errno otherwise.
func (fsys *FS) lookupErrno(err error) syscall.Errno {
	var gone *goneError
	if errors.As(err, &gone) {
		return fsys.stale("lookup", err)
	}
	return fsys.errno("lookup", err)
}

// walks tells an open that follows its caller's own lookup of a view node
// from one through the kernel's cached entry. The first may open the
// version the lookup found (leased) even if the original's name moved on
// in between: its walk began before the move, as a walk racing a rename
// on a disk. The second began after, perhaps: it must find the name's
// version now, so a moved name answers ESTALE and the kernel looks it up
// again. (The kernel keeps a view's entry for a jiffy, so an open within
// a jiffy of the same thread's stat of the name passes as the first.)
// Kept by the filesystem, keyed by the node's inode number, not on the
// node: a lookup's new node object is dropped for the one go-fuse already
// has of that number (red team 11 saw every lookup after the first
// noted on a dropped object, and the opens fail).
type walks struct {
	mu sync.Mutex
	by map[walk]time.Time // when each caller's thread looked each node up
}

// walk is one caller's thread's lookup of one view node.
type walk struct {
	node uint64 // the node's inode number (StableAttr.Ino)
	pid  uint32 // the caller's thread
}

// sweepAt is the count of noted lookups past which looked drops the
// expired ones.
const sweepAt = 64

// looked notes a lookup of node by ctx's caller.
func (w *walks) looked(ctx context.Context, node uint64) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = make(map[walk]time.Time)
	}
	if len(w.by) >= sweepAt {
		for k, t := range w.by {
			if now.Sub(t) > viewLease {
				delete(w.by, k)
			}
		}
	}
	w.by[walk{node, c.Pid}] = now
}

// recent reports whether ctx's caller looked node up within the lease
// and has not opened it since. An open (forget) forgets that lookup; the
// getattr between the lookup and the open (the kernel's permission check,
// the view's attributes having expired) keeps it for the open.
func (w *walks) recent(ctx context.Context, node uint64, forget bool) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	k := walk{node, c.Pid}
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.by[k]
	if forget {
		delete(w.by, k)
	}
	return ok && time.Since(t) <= viewLease
}
