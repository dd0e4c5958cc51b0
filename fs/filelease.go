package fs

import (
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// fileLeases hold the file version each lookup found for the thread that
// looked it up, for viewLease or until that thread opens, unlinks or
// renames over the name. The kernel opens a name in two requests, a
// lookup and then an open of the node the lookup returned; a rename over
// the name in between leaves the node's version gone by the open, which
// answers ESTALE, and the kernel looks the name up again once. Two
// writers renaming over one name in turn can beat that retry too (CI saw
// an open fail so in TestReadWriteListStress). Leased, the version stays
// (as an orphan) for the open, which reads it whole, as an open racing a
// rename on a disk reads the file its walk found.
//
// A lease is one pin in the store per thread and version however often
// that thread looks the name up (a stat loop renews it), and costs no
// write unless the name goes while it is held: then the version's release
// waits for the lease's end.
type fileLeases struct {
	mu sync.Mutex
	by map[walk]*fileLease
}

// fileLease is one thread's lease of one version (walk.node is the
// version's store inode here).
type fileLease struct {
	until time.Time
	timer *time.Timer
}

// take leases version ino to ctx's caller: held reports whether it did
// (see Store.HoldReadable), and err is the store's, with fs.ErrNotExist
// when the version is gone already.
func (l *fileLeases) take(ctx context.Context, fsys *FS, ino uint64) (held bool, err error) {
	c, ok := fuse.FromContext(ctx)
	if !ok || c.Pid == 0 {
		return false, nil
	}
	k := walk{ino, c.Pid}
	until := time.Now().Add(viewLease)
	l.mu.Lock()
	if fl := l.by[k]; fl != nil {
		fl.until = until // held already: the version exists
		l.mu.Unlock()
		return true, nil
	}
	l.mu.Unlock()
	if held, err = fsys.s.HoldReadable(ino, c.Uid, c.Gid); !held {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if fl := l.by[k]; fl != nil {
		// The same thread's concurrent lookup leased it meanwhile.
		fl.until = until
		go fsys.unlease(ino)
		return true, nil
	}
	if l.by == nil {
		l.by = make(map[walk]*fileLease)
	}
	fl := &fileLease{until: until}
	fl.timer = time.AfterFunc(viewLease, func() { l.expire(fsys, k, fl) })
	l.by[k] = fl
	return true, nil
}

// expire ends lease fl of k, or sets its timer for the lease's renewed
// end.
func (l *fileLeases) expire(fsys *FS, k walk, fl *fileLease) {
	l.mu.Lock()
	if l.by[k] != fl {
		l.mu.Unlock()
		return // ended by drop
	}
	if left := time.Until(fl.until); left > 0 {
		fl.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	delete(l.by, k)
	l.mu.Unlock()
	fsys.unlease(k.node)
}

// drop ends ctx's caller's lease of version ino, if it holds one: the
// thread opened the version (its handle holds it now), or is unlinking or
// renaming over the name, which must not leave the version behind as an
// orphan for a lease that no open will use.
func (l *fileLeases) drop(ctx context.Context, fsys *FS, ino uint64) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return
	}
	k := walk{ino, c.Pid}
	l.mu.Lock()
	fl := l.by[k]
	if fl != nil {
		delete(l.by, k)
		fl.timer.Stop()
	}
	l.mu.Unlock()
	if fl != nil {
		fsys.unlease(ino)
	}
}

// unlease drops a lease's pin of version ino.
func (fsys *FS) unlease(ino uint64) {
	if fsys.s.Closed() {
		return // the store's next open releases what is orphaned
	}
	if err := fsys.s.Unhold(ino); err != nil {
		fsys.log.Warn("release a lookup's lease", "ino", ino, "err", err)
	}
}
