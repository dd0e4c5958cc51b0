package fs

import (
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// fileNode is a regular file.
type fileNode struct {
	node

	mu sync.Mutex // guards everything below, and serialises commits
	// sp holds the content being written, shared by every write handle;
	// nil when no one writes.
	sp      *spool
	writers int
	// version counts commits, and writes dropped uncommitted
	// (dropSpool); cached is the version whose pages the kernel may
	// hold, so an open after either drops them.
	version, cached uint64
	// held is the store inode this node holds open while it is written
	// (see store.Hold), 0 if none.
	held uint64
	// committed is set by a commit whose attributes and pages the kernel
	// must drop; unlock tells it, once f.mu is released.
	committed bool

	vmu sync.Mutex // guards cur and readers; taken after mu, if both
	// cur is the version that read handles serve, pinned while any is
	// open: the newest commit (see reader).
	cur     *version
	readers int
	// writing mirrors sp != nil for readers, which take mu only then.
	writing atomic.Bool
	// createdAs is the directory's name and the file's, from Create,
	// before the node has a parent in the tree.
	createdAs [2]string
}

// unlock releases f.mu and then, if a commit happened under it, tells the
// kernel that the file's attributes and cached pages are stale, before the
// close, fsync or truncate that committed returns. The notification drops
// attributes (a size or mtime read before the commit, by a lookup, ls or
// stat racing the writer, would otherwise be kept for the whole attribute
// timeout) and pages of the previous version. It is sent without f.mu:
// invalidating pages waits for reads in flight, and a read of a file being
// written takes f.mu.
func (f *fileNode) unlock() {
	notify := f.committed
	f.committed = false
	f.mu.Unlock()
	if notify {
		if e := f.fsys.notifyContent(&f.Inode); e != 0 && e != syscall.ENOENT && e != syscall.ENOSYS {
			f.fsys.log.Warn("invalidate the kernel's cache after a commit", "ino", f.storeIno(), "errno", e)
		}
		f.fsys.notifyViews(&f.Inode)
	}
}

// writtenAttr sets the size and times of a file being written in
// attributes read from the store, which hold its last commit: stat shows
// a write's mtime and ctime at once, as a local disk does, not at the
// commit. Called with f.mu held.
func (f *fileNode) writtenAttr(a *fuse.Attr) {
	if f.sp == nil {
		return
	}
	a.Size = uint64(f.sp.size)
	a.Blocks = (a.Size + 511) / 512
	if f.sp.dirty {
		a.SetTimes(nil, &f.sp.mtime, nil)
		if f.sp.ctime.After(a.ChangeTime()) {
			a.SetTimes(nil, nil, &f.sp.ctime)
		}
	}
}

// keepTimes carries a setattr's times into the pending commit, so that the
// commit does not overwrite them: cp -p and tar set the times of a file
// they have written before they close it. A write after this makes the
// mtime now again (modified), as on a local disk. Called with f.mu held.
func (f *fileNode) keepTimes(in *fuse.SetAttrIn, fi *store.FileInfo) {
	if f.sp == nil || !f.sp.dirty {
		return // nothing to commit: the store has the times
	}
	if _, ok := in.GetMTime(); ok {
		f.sp.mtime = fi.Mtime
	}
	if fi.Ctime.After(f.sp.ctime) {
		f.sp.ctime = fi.Ctime
	}
}

// Getattr describes the file as it is now: under f.mu, so that the store
// inode and the bytes being written are read together, never the inode of
// a commit that the writer has since replaced.
func (f *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := f.fsys.s.StatIno(f.ino.Load())
	if err != nil {
		return f.stale("getattr", err)
	}
	fillAttr(fi, &out.Attr)
	f.writtenAttr(&out.Attr)
	f.blobAttr(fi, out)
	return 0
}

func (f *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	// The reply's attributes are cached (rawReplies.SetAttr): go-fuse
	// fills in the inode number of a getattr's, not of a setattr's.
	defer func() { out.Ino = f.StableAttr().Ino }()
	timesDone := false
	if size, ok := in.GetSize(); ok {
		var e syscall.Errno
		if timesDone, e = f.truncate(ctx, int64(size), in); e != 0 {
			return e
		}
	}
	// Under f.mu, so that the change applies to the inode of the newest
	// commit and the pending commit then keeps it.
	f.mu.Lock()
	defer f.mu.Unlock()
	var fi *store.FileInfo
	if f.fsys.killpriv && killsPrivs(in) {
		killed, e := f.killPrivs(ctx, in)
		if e != 0 {
			return e
		}
		// A kill alone (a write's) is done; so is the kernel's setattr
		// without attributes (but the ctime), once the kill has stamped
		// the ctime.
		attrs := in.Valid &^ (fuse.FATTR_FH | fuse.FATTR_LOCKOWNER)
		if attrs == fuse.FATTR_KILL_SUIDGID || attrs&^fuse.FATTR_CTIME == 0 && killed != nil {
			if fi = killed; fi == nil {
				var err error
				if fi, err = f.fsys.s.StatIno(f.ino.Load()); err != nil {
					return f.stale("getattr", err)
				}
			}
			fillAttr(fi, &out.Attr)
			f.writtenAttr(&out.Attr)
			return 0
		}
	}
	if timesDone || f.spoolTimes(in) {
		var err error
		if fi, err = f.fsys.s.StatIno(f.ino.Load()); err != nil {
			return f.stale("getattr", err)
		}
	} else if fi = f.knownTimes(in); fi == nil {
		var e syscall.Errno
		if fi, e = f.setattr(ctx, in); e != 0 {
			return e
		}
		f.keepTimes(in, fi)
	}
	fillAttr(fi, &out.Attr)
	f.writtenAttr(&out.Attr)
	return 0
}

// killsPrivs says a setattr must clear the file's set-ID bits, when the
// daemon handles that (FUSE_HANDLE_KILLPRIV_V2): one with
// FATTR_KILL_SUIDGID (a truncate by a caller without CAP_FSETID, a chown,
// or a write's; see rawReplies.Write), or one without any attribute but
// the ctime (which the kernel passes on only when it caches writes): what
// the kernel sends for chown(f, -1, -1) and for its own
// file_remove_privs (a write, fallocate or truncate by such a caller, of a
// file that it knows has a set-ID bit) once it has taken out the kill
// flags it leaves to the daemon. ext4 clears the bits at all of these. (A
// utimensat that omits both times looks the same, and clears them too,
// where ext4 keeps them: the safe side of a case FUSE cannot tell apart.)
func killsPrivs(in *fuse.SetAttrIn) bool {
	return in.Valid&fuse.FATTR_KILL_SUIDGID != 0 || in.Valid&^(fuse.FATTR_FH|fuse.FATTR_LOCKOWNER|fuse.FATTR_CTIME) == 0
}

// killedMode is m as a write, truncate or chown by a caller in group
// inGroup leaves it (the kernel's rule, setattr_should_drop_suidgid):
// without set-user-ID, and without set-group-ID if the group may execute
// the file or the caller is not in the file's group. (A set-group-ID bit
// without group execute, once marking files for mandatory locking, stays
// when a member of the group writes.)
func killedMode(m iofs.FileMode, inGroup func() bool) iofs.FileMode {
	m &^= iofs.ModeSetuid
	if m&iofs.ModeSetgid != 0 && (m&0o010 != 0 || !inGroup()) {
		m &^= iofs.ModeSetgid
	}
	return m
}

// killPrivs clears the file's set-ID bits as killedMode says, and returns
// the changed attributes, or nil if there was nothing to clear: every
// write by a caller without CAP_FSETID asks for it, so it costs a read of
// the inode, and a (journaled, unsynced) transaction only for the rare file
// with a set-ID bit. A commit pending keeps the kill's ctime, as keepTimes
// does a setattr's. Called with f.mu held.
//
// A kill the kernel asks for (FATTR_KILL_SUIDGID: a write, a truncation)
// was allowed by the kernel's checks. A setattr without attributes is
// also a chown(f, -1, -1), which the kernel passes on unchecked: from a
// caller who neither owns the file nor may write it, it fails with EPERM
// on a file with a set-ID bit to clear, as on a disk filesystem (where
// the kill becomes a mode change that needs the owner), and changes
// nothing.
func (f *fileNode) killPrivs(ctx context.Context, in *fuse.SetAttrIn) (*store.FileInfo, syscall.Errno) {
	fi, err := f.fsys.s.StatIno(f.ino.Load())
	if err != nil {
		return nil, f.stale("getattr", err)
	}
	m := fi.Mode &^ iofs.ModeType
	var c *store.Cred
	k := killedMode(m, func() bool {
		c = cred(ctx)
		return c == nil || c.UID == 0 || c.GID == fi.GID || slices.Contains(c.Groups, fi.GID)
	})
	if k == m {
		return nil, 0
	}
	if c == nil {
		c = cred(ctx)
	}
	if in.Valid&fuse.FATTR_KILL_SUIDGID == 0 && !c.MayChangeMode(fi) {
		return nil, syscall.EPERM
	}
	if fi, err = f.fsys.s.SetAttr(f.ino.Load(), store.AttrChange{Mode: &k}); err != nil {
		return nil, f.stale("clear set-ID bits", err)
	}
	if f.sp != nil && f.sp.dirty && fi.Ctime.After(f.sp.ctime) {
		f.sp.ctime = fi.Ctime
	}
	return fi, 0
}

// onlyTimes says a setattr changes nothing but the size, mtime and ctime:
// what the kernel sends when it caches writes (-o writeback_cache), to pass
// on the times of the writes it holds (before it flushes or syncs the
// file) and with every truncation.
func onlyTimes(in *fuse.SetAttrIn) bool {
	const times = fuse.FATTR_MTIME | fuse.FATTR_MTIME_NOW | fuse.FATTR_CTIME
	const allowed = times | fuse.FATTR_SIZE | fuse.FATTR_FH | fuse.FATTR_LOCKOWNER
	return in.Valid&^allowed == 0 && in.Valid&times != 0
}

// knownTimes returns the stored attributes if a setattr that sets only
// the mtime and ctime (see onlyTimes) sets the mtime the file has: the
// kernel, when it caches writes, passes its times on after every operation
// that changes a file's ctime (a rename, an unlink), and synchronously.
// The store stamped the ctime of that operation already, so storing the
// kernel's would cost a metadata transaction per rename for nothing. (A
// utimensat that sets the mtime the file has looks the same, and keeps the
// stored ctime; the kernel shows its own while it caches the file.) It
// returns nil for any other setattr: one without a ctime (the kernel sends
// one only when it caches writes), or a chown(f, -1, -1), which sets only
// the ctime. Called with f.mu held.
func (f *fileNode) knownTimes(in *fuse.SetAttrIn) *store.FileInfo {
	mt, ok := in.GetMTime()
	if !onlyTimes(in) || !ok || in.Valid&fuse.FATTR_MTIME_NOW != 0 || in.Valid&fuse.FATTR_CTIME == 0 {
		return nil
	}
	fi, err := f.fsys.s.StatIno(f.ino.Load())
	if err != nil || !fi.Mtime.Equal(mt) {
		return nil
	}
	return fi
}

// spoolTimes gives the pending commit the times of a setattr that sets
// only times (see onlyTimes), instead of storing them now, when there is a
// pending commit: it stores them with the content. With the writeback
// cache every close and fsync of a written file sends one, so storing it
// apart would cost a metadata transaction per close. A utimensat while the
// file is written is kept as keepTimes keeps it, and a write after it makes
// the mtime now again. Called with f.mu held.
func (f *fileNode) spoolTimes(in *fuse.SetAttrIn) bool {
	if f.sp == nil || !f.sp.dirty || !onlyTimes(in) {
		return false
	}
	mt, setM := in.GetMTime()
	if setM {
		f.sp.mtime = mt
	}
	if ct, ok := in.GetCTime(); ok {
		f.sp.ctime = ct
	} else if setM {
		f.sp.ctime = time.Now() // setting a time changes the ctime
	}
	return true
}

// truncate sets the file's size: in the spool when it is open for
// writing (the O_TRUNC of an open arrives here, after the open), committed
// at the writer's close or fsync; otherwise as a new version committed at
// once. It reports whether it took the setattr's times too (see
// spoolTimes): the kernel's writeback cache sends them with every
// truncation, and a truncation committed at once stores them with it.
func (f *fileNode) truncate(ctx context.Context, size int64, in *fuse.SetAttrIn) (bool, syscall.Errno) {
	f.mu.Lock()
	defer f.unlock()
	temp := f.writers == 0
	if temp {
		if e := f.hold(); e != 0 {
			return false, e
		}
		defer f.unhold()
	}
	if f.sp == nil {
		if e := f.startSpool(ctx, size == 0); e != 0 {
			return false, e
		}
	}
	if err := f.sp.truncate(size); err != nil {
		return false, f.fsys.errno("truncate", err)
	}
	f.sp.modified()
	times := f.spoolTimes(in)
	if !temp {
		return times, 0
	}
	e := f.commitLocked(ctx)
	f.dropSpool(false)
	return times, e
}

// startSpool begins writing: a spool over the committed version unless
// empty is set (O_TRUNC), so that writes into the middle of an existing
// file keep the rest. Nothing is copied: the spool pins the committed
// version and reads what was not written from it (see spool). Called with
// f.mu held.
func (f *fileNode) startSpool(ctx context.Context, empty bool) syscall.Errno {
	var base *store.File
	if !empty {
		var err error
		if base, err = f.fsys.s.OpenIno(f.ino.Load()); err != nil {
			return f.stale("open for write", err)
		}
	}
	snapshot, blob := f.chunkedWhole()
	// A new file's cells are hashed as they are written only where the
	// commit cuts it on their grid: a blob. A snapshot is cut by its rows
	// (its pieces are hashed instead), and a store that cuts other files
	// by their content (store.CutsByContent) cuts a new one where its
	// bytes say, so those sums were work done twice.
	fresh := base == nil || base.Size() == 0
	noHash := f.fsys.noWriteHash || snapshot || fresh && !blob && f.fsys.s.CutsByContent()
	sp, err := newSpool(f.fsys.spool, base, f.fsys.s.ChunkSize(), noHash, f.fsys.memSpools)
	if err != nil {
		if base != nil {
			base.Close()
		}
		return f.fsys.errno("start spool", err)
	}
	sp.asyncMem = f.fsys.asyncMem
	if !f.fsys.noWriteHash {
		sp.stored, sp.storedAll = f.fsys.s.HasChunk, f.fsys.s.HasChunks
	}
	if !f.fsys.noWriteHash && (base == nil || base.Size() == 0) {
		switch {
		case blob:
			sp.trackWhole()
		case snapshot:
			sp.trackPieces(f.fsys.s.SnapshotPieces, nil)
		default:
			// Whatever its name: a snapshot by its magic, a llama.cpp
			// state file by its, and, where the store cuts by content,
			// anything it parses no format of.
			sp.trackPieces(f.fsys.s.ContentPieces, f.fsys.s.CutSegment)
		}
	}
	f.sp = sp
	f.writing.Store(true)
	return 0
}

// chunkedWhole reports whether the file's name makes the store chunk it
// from its whole content (store.ChunkedWhole): a snapshot, whose cells
// are then not hashed as they are written, or a blob, which is chunked on
// the grid of cells but named by the sha256 of its whole content (the
// spool hashes that too: trackWhole).
func (f *fileNode) chunkedWhole() (snapshot, blob bool) {
	dir, name := f.createdAs[0], f.createdAs[1]
	if n, parent := f.Parent(); parent != nil {
		name = n
		dir, _ = parent.Parent()
	}
	if name == "" {
		return false, false
	}
	if store.InBlocksDir(dir) {
		return false, true
	}
	return store.ChunkedWhole(dir, name), false
}

// dropSpool discards the spool: its file, unless the store adopted it as
// a pack, and its pin of the committed version. Called with f.mu held.
//
// A spool dropped with changes no commit stored (the commit failed:
// ENOSPC, EIO) leaves the writes in the kernel's pages, which the file's
// content no longer has: they are dropped as a commit's are (the
// notification, and the next open, which sees another version), so that
// no reader is served bytes that were never stored.
func (f *fileNode) dropSpool(adopted bool) {
	if f.sp != nil {
		if f.sp.dirty {
			f.version++
			f.committed = true
		}
		f.sp.close(!adopted)
		f.sp = nil
		f.writing.Store(false)
	}
}

// hold pins the node's store inode while it is written, so that it stays
// (as an orphan) if its name goes, as an open file does. Called with f.mu
// held.
func (f *fileNode) hold() syscall.Errno {
	if f.held != 0 {
		return 0
	}
	if err := f.fsys.s.Hold(f.ino.Load()); err != nil {
		return f.stale("open for write", err)
	}
	f.held = f.ino.Load()
	return 0
}

// unhold drops the node's hold on its store inode. Called with f.mu held.
func (f *fileNode) unhold() {
	if f.held != 0 {
		if err := f.fsys.s.Unhold(f.held); err != nil {
			f.fsys.log.Warn("release written file", "err", err)
		}
		f.held = 0
	}
}

// commitLocked commits the spool's changes as the file's new content, if
// it changed: only the chunks it changed are hashed and stored (see
// store.CommitChanges), and after the commit the spool is dropped, since
// the committed version is all it held; a later write starts a new one,
// over the new version.
// It is not cancelled when the caller is interrupted: the kernel sends an
// interrupt for any signal the caller receives (Go programs get SIGURG for
// preemption all the time), and a close(2) or fsync(2) that failed with
// EINTR after the writes were accepted would leave the file unstored.
// A file that lost its name while being written is not stored: its bytes
// die with the spool, as an unlinked file's do. Called with f.mu held.
func (f *fileNode) commitLocked(ctx context.Context) syscall.Errno {
	if f.sp == nil || !f.sp.dirty {
		return 0
	}
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	// The commit takes over the writer's hold and the spool's pin of the
	// version it replaces (CommitOptions.Unhold, Close), so that a version
	// no reader pins is released in the commit's own transaction.
	ino := f.ino.Load()
	opts := store.CommitOptions{Mtime: f.sp.mtime, Ctime: f.sp.ctime, Adopt: true,
		Hold: f.held != 0, Unhold: f.held != 0 && f.held == ino}
	if f.sp.base != nil {
		opts.Close = []*store.File{f.sp.base}
	}
	if err := f.sp.landed(); err != nil {
		return f.fsys.errno("commit", err)
	}
	f.sp.dropAhead()     // a spool adopted as a pack keeps no blocks past its end
	ch := f.sp.changes() // waits for the hashes in flight
	hashed := time.Now()
	fi, st, err := f.fsys.s.CommitChanges(ctx, ino, ch, f.sp, opts)
	if errors.Is(err, iofs.ErrNotExist) {
		f.sp.dirty = false
		return 0
	}
	if err != nil {
		return f.fsys.errno("commit", err)
	}
	f.fsys.Metrics.countCommit(fi.Size, st, time.Since(start))
	// Readers move to the new version before the spool goes: a reader
	// that finds no spool must find this version, not the one before
	// (shorter, perhaps: a reply shorter than the size the kernel has from
	// the writes would be end of file to it).
	old := f.held
	if old != 0 {
		f.held = fi.Ino // the commit held the new version
	}
	if opts.Unhold {
		old = 0 // and dropped the hold of the old one
	}
	f.ino.Store(fi.Ino)
	f.version++
	f.committed = true
	f.vmu.Lock()
	if f.cur != nil {
		f.serveLocked(fi.Ino)
	}
	f.vmu.Unlock()
	// An adopted spool became a pack: it is the store's now.
	committed := time.Now()
	f.dropSpool(st.Adopted)
	f.fsys.log.Debug("committed", "ino", fi.Ino, "bytes", fi.Size, "new", st.NewBytes, "adopted", st.Adopted,
		"hash_wait", hashed.Sub(start), "commit", committed.Sub(hashed), "drop_spool", time.Since(committed))
	if old != 0 {
		if err := f.fsys.s.Unhold(old); err != nil {
			f.fsys.log.Warn("release the previous version", "ino", old, "err", err)
		}
	}
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		h, e := f.openWriter(ctx, flags&syscall.O_TRUNC != 0)
		return h, f.fsys.writeOpenFlags(flags), e
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vmu.Lock()
	defer f.vmu.Unlock()
	if f.cur == nil || f.cur.f.Ino() != f.ino.Load() {
		if e := f.serveLocked(f.ino.Load()); e != 0 {
			return nil, 0, e
		}
	}
	f.readers++
	// The handle holds the version now (filelease.go).
	f.fsys.fileLeases.drop(ctx, f.fsys, f.cur.f.Ino())
	// The kernel's pages are this version's, or are dropped (opencache.go).
	fl := openCacheFlags(f.fsys.pageCache, f.cached == f.version)
	f.cached = f.version
	return &reader{node: f, fsys: f.fsys}, fl, 0
}

// serveLocked makes version ino the one that read handles serve, pinning
// it; the previous one is released once no reply uses it. Called with
// f.vmu held.
func (f *fileNode) serveLocked(ino uint64) syscall.Errno {
	sf, err := f.fsys.s.OpenIno(ino)
	if err != nil {
		return f.stale("open", err)
	}
	v := &version{f: sf, log: f.fsys.log.Warn}
	v.refs.Store(1)
	if f.cur != nil {
		f.cur.release()
	}
	f.cur = v
	return 0
}

// openWriter returns a write handle on the file. The spool starts with
// the first write or truncate (Write, truncate), not here: the kernel opens
// an existing file without O_TRUNC and sends the truncation afterwards, so
// starting here would copy the whole committed content into the spool
// only to cut it off, reading (and opening) its packs for every rewrite.
// A new file (trunc, from Create) starts its empty spool at once.
func (f *fileNode) openWriter(ctx context.Context, trunc bool) (*writer, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.hold(); e != 0 {
		return nil, e
	}
	if f.sp == nil && trunc {
		if e := f.startSpool(ctx, true); e != 0 {
			if f.writers == 0 {
				f.unhold()
			}
			return nil, e
		}
		// Truncating a non-empty file is a change to commit; a new
		// (empty) file is committed already.
		if fi, err := f.fsys.s.StatIno(f.ino.Load()); err != nil || fi.Size > 0 {
			f.sp.modified()
		}
	} else if trunc && f.sp.size > 0 {
		if err := f.sp.truncate(0); err != nil {
			return nil, f.fsys.errno("truncate", err)
		}
		f.sp.modified()
	}
	f.writers++
	return &writer{f: f}, 0
}

// reader is a read handle. Every read handle of a node serves the node's
// newest commit (fileNode.cur): the kernel keeps one page cache per file,
// shared by every handle, so a handle that went on reading an older
// version after an in-place rewrite would put that version's bytes into
// pages that later opens read. This is what a local disk does: a reader of
// a file rewritten in place sees the new bytes. (A file renamed over or
// removed is another case: the name leads to another node, and readers of
// the old one keep its content, which their node pins.) With a nil node the
// handle serves one fixed version (fixed), as views do.
type reader struct {
	node  *fileNode
	fixed *version
	fsys  *FS
	ahead readAhead
}

// version is one committed version of a file, open (pinned) in the store,
// with a count of its users: the node or view that serves it, and the
// replies in flight that read from it.
type version struct {
	f    *store.File
	refs atomic.Int32
	log  func(msg string, args ...any)
}

// fixedReader returns a handle that serves sf, and closes it when released.
func fixedReader(fsys *FS, sf *store.File) *reader {
	v := &version{f: sf, log: fsys.log.Warn}
	v.refs.Store(1)
	return &reader{fixed: v, fsys: fsys}
}

// release drops one use; the last closes the version's store file.
func (v *version) release() {
	if v.refs.Add(-1) == 0 {
		if err := v.f.Close(); err != nil {
			v.log("close a file version", "ino", v.f.Ino(), "err", err)
		}
	}
}

// acquire returns the version to serve a read from, with a use that the
// caller releases.
func (r *reader) acquire() *version {
	if r.node == nil {
		r.fixed.refs.Add(1)
		return r.fixed
	}
	f := r.node
	f.vmu.Lock()
	defer f.vmu.Unlock()
	f.cur.refs.Add(1)
	return f.cur
}

func (r *reader) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	t := r.fsys.Metrics.readTimer()
	// While the file is written, its bytes are the writer's: the kernel
	// sizes the file by the writes it has seen, and a reply shorter than
	// that size (from the shorter committed version) would be end of file
	// to it, shrinking the size that O_APPEND and SEEK_END use. A write
	// sets writing before it returns, so a read issued after it sees it.
	if f := r.node; f != nil && f.writing.Load() {
		f.mu.Lock()
		if f.sp != nil {
			defer f.mu.Unlock()
			defer t.observe()
			return f.readSpool(dest, off)
		}
		f.mu.Unlock()
	}
	v := r.acquire()
	r.ahead.read(off, len(dest), func(off, n int64) {
		// Off the request's path: the kernel's readahead submits the
		// reads, which takes a while for 8 MiB, and a reader faulting
		// pages of a mapping in waits for this request.
		v.refs.Add(1)
		go func() {
			v.f.Prefetch(off, n)
			v.release()
		}()
	})
	res, e := r.read(v.f, dest, off)
	if e != 0 || res == nil {
		v.release()
		t.observe()
		return res, e
	}
	// A spliced reply's bytes move from the pack after Read returns: its
	// latency ends when go-fuse has sent it.
	return whenDone(res, func() { v.release(); t.observe() }), 0
}

func (r *reader) read(sf *store.File, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := min(int64(len(dest)), sf.Size()-off)
	r.fsys.Metrics.ReadRequests.Inc()
	if r.fsys.splice {
		if segs, ok := sf.Segments(off, int(n)); ok {
			// spliceResult takes over segs, whether it splices or not.
			if res := spliceResult(segs, int(n)); res != nil {
				r.fsys.Metrics.SplicedReads.Inc()
				r.fsys.Metrics.ReadBytes.Add(float64(n))
				return res, 0
			}
		}
	}
	res, e := r.readAt(sf, dest, off)
	if e == 0 {
		r.fsys.Metrics.ReadBytes.Add(float64(res.Size()))
	}
	return res, e
}

// readAt copies a read. The reply is a vector, which go-fuse writes to the
// kernel as it is; it would first try (and, for a full request under the
// default pipe limit, fail and log) to splice a ReadResultData.
func (r *reader) readAt(sf *store.File, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := sf.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, r.fsys.errno("read", err)
	}
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

func (r *reader) Release(ctx context.Context) syscall.Errno {
	if r.node == nil {
		r.fixed.release()
		return 0
	}
	f := r.node
	f.vmu.Lock()
	defer f.vmu.Unlock()
	if f.readers--; f.readers == 0 {
		f.cur.release()
		f.cur = nil
	}
	return 0
}

// readSpool reads the spool; without one (the file was committed and the
// spool adopted as a pack), the committed version, which the writer holds.
// Called with f.mu held.
func (f *fileNode) readSpool(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.sp == nil {
		sf, err := f.fsys.s.OpenIno(f.ino.Load())
		if err != nil {
			return nil, f.fsys.errno("read", err)
		}
		defer sf.Close()
		n, err := sf.ReadAt(dest, off)
		if err != nil && err != io.EOF {
			return nil, f.fsys.errno("read", err)
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	if off >= f.sp.size {
		return fuse.ReadResultData(nil), 0
	}
	n, err := f.sp.ReadAt(dest[:min(int64(len(dest)), f.sp.size-off)], off)
	if err != nil && err != io.EOF {
		return nil, f.fsys.errno("read spool", err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// writer is a handle open for writing.
type writer struct {
	f        *fileNode
	released bool
}

func (w *writer) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sp == nil {
		if e := f.startSpool(ctx, false); e != 0 {
			return 0, e
		}
	}
	n, err := f.sp.write(data, off)
	f.fsys.Metrics.WriteBytes.Add(float64(n))
	if n > 0 {
		f.sp.modified()
	}
	if err != nil && n == 0 {
		return 0, f.fsys.errno("write", err)
	}
	// A write that stopped early (a full disk) reports what it wrote, as
	// a disk filesystem does: the caller's next write gets the error. An
	// error reply would say that nothing was written, and the bytes that
	// were would be committed all the same.
	return uint32(n), 0
}

func (w *writer) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.f.readSpool(dest, off)
}

// Flush runs at every close(2) of the handle: the content is committed, so
// that a file closed by cp is stored when cp returns.
func (w *writer) Flush(ctx context.Context) syscall.Errno {
	w.f.mu.Lock()
	defer w.f.unlock()
	return w.f.commitLocked(ctx)
}

// Fsync commits the file's pending writes, whichever handle (or none)
// it comes through: once it returns, the content is durable. A file with
// nothing pending is durable already.
func (f *fileNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	// Changes of the file made before (its creation, chmod, xattrs) are
	// committed without a sync; a commit syncs them with itself, and with
	// nothing to commit the fsync syncs them (store/journal.go).
	defer f.fsys.Metrics.fsyncTimer().observe()
	mark := f.fsys.s.Changes()
	f.mu.Lock()
	defer f.unlock()
	if e := f.commitLocked(ctx); e != 0 {
		return e
	}
	if err := f.fsys.s.SyncTo(mark); err != nil {
		return f.fsys.errno("fsync", err)
	}
	return 0
}

// Release commits what is left and, for the last writer, drops the spool.
func (w *writer) Release(ctx context.Context) syscall.Errno {
	f := w.f
	f.mu.Lock()
	defer f.unlock()
	if w.released {
		return 0
	}
	w.released = true
	e := f.commitLocked(context.Background()) // the caller has gone; finish the work
	f.writers--
	if f.writers == 0 {
		f.dropSpool(false)
		f.unhold()
	}
	return e
}

func (w *writer) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return w.f.Getattr(ctx, w, out)
}
