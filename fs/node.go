package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
)

// node is what files and directories share: the go-fuse inode and the
// store inode it shows. A file's store inode changes at each commit, so it
// is read and replaced atomically.
type node struct {
	gofs.Inode
	fsys *FS
	ino  atomic.Uint64
}

// fillAttr copies store attributes into a FUSE attribute.
func fillAttr(fi *store.FileInfo, a *fuse.Attr) {
	a.Size = uint64(fi.Size)
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = requestBytes
	a.Mode = unixMode(fi.Mode)
	switch {
	case fi.IsDir():
		a.Nlink = 2
	case fi.Name == "":
		a.Nlink = 0 // removed while open
	default:
		a.Nlink = 1
	}
	a.Uid, a.Gid = fi.UID, fi.GID
	a.SetTimes(nil, &fi.Mtime, nil)
	at, ct := fi.Atime, fi.Ctime
	if at.IsZero() {
		at = fi.Mtime
	}
	if ct.IsZero() {
		ct = fi.Mtime
	}
	a.SetTimes(&at, nil, &ct)
}

// unixMode converts a Go file mode to st_mode bits.
func unixMode(m iofs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&iofs.ModeSetuid != 0 {
		mode |= syscall.S_ISUID
	}
	if m&iofs.ModeSetgid != 0 {
		mode |= syscall.S_ISGID
	}
	if m&iofs.ModeSticky != 0 {
		mode |= syscall.S_ISVTX
	}
	if m.IsDir() {
		return mode | syscall.S_IFDIR
	}
	return mode | syscall.S_IFREG
}

// goMode converts st_mode permission bits to a Go file mode.
func goMode(mode uint32) iofs.FileMode {
	m := iofs.FileMode(mode & 0o777)
	if mode&syscall.S_ISUID != 0 {
		m |= iofs.ModeSetuid
	}
	if mode&syscall.S_ISGID != 0 {
		m |= iofs.ModeSetgid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= iofs.ModeSticky
	}
	return m
}

// owner is the caller of a request, who owns what it creates.
func owner(ctx context.Context) store.Owner {
	if c, ok := fuse.FromContext(ctx); ok {
		return store.Owner{UID: c.Uid, GID: c.Gid}
	}
	return store.Owner{}
}

// child returns the go-fuse inode for a store entry: the existing node of
// that file (its identity, the inode number users see, which commits
// keep), else a new one. go-fuse keeps one node per inode number, so a
// file found under a new name (renamed) is the node it was.
func (n *node) child(ctx context.Context, name string, fi *store.FileInfo, out *fuse.EntryOut) *gofs.Inode {
	fillAttr(fi, &out.Attr)
	if ch := n.GetChild(name); ch != nil && ch.StableAttr().Ino == fi.ID {
		return ch
	}
	var ops gofs.InodeEmbedder
	mode := uint32(syscall.S_IFREG)
	if fi.IsDir() {
		d := &dirNode{node: node{fsys: n.fsys}}
		d.ino.Store(fi.Ino)
		ops, mode = d, syscall.S_IFDIR
	} else {
		f := &fileNode{node: node{fsys: n.fsys}}
		f.ino.Store(fi.Ino)
		ops = f
	}
	return n.NewInode(ctx, ops, gofs.StableAttr{Mode: mode, Ino: fi.ID})
}

func (n *node) storeIno() uint64 { return n.ino.Load() }

// stale maps the error of an operation on the node's own store inode. A
// node whose inode is gone was replaced or removed between the kernel's
// lookup and this call (a rename over it, a commit through another path):
// ESTALE makes the kernel look the name up again and retry the call once
// (LOOKUP_REVAL), as it does for NFS, instead of failing an open or a stat
// of a name that exists.
func (n *node) stale(op string, err error) syscall.Errno { return n.fsys.stale(op, err) }

// stale is node.stale for the nodes of the virtual tree.
func (fsys *FS) stale(op string, err error) syscall.Errno {
	if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, manifest.ErrNotFound) {
		fsys.Metrics.countError(syscall.ESTALE)
		return syscall.ESTALE
	}
	return fsys.errno(op, err)
}

// setattr applies the attribute part of a setattr (not the size).
func (n *node) setattr(ctx context.Context, in *fuse.SetAttrIn) (*store.FileInfo, syscall.Errno) {
	var c store.AttrChange
	changed := false
	if mode, ok := in.GetMode(); ok {
		m := goMode(mode)
		c.Mode, changed = &m, true
	}
	if uid, ok := in.GetUID(); ok {
		c.UID, changed = &uid, true
	}
	if gid, ok := in.GetGID(); ok {
		c.GID, changed = &gid, true
	}
	if mt, ok := in.GetMTime(); ok {
		c.Mtime, changed = &mt, true
	}
	if at, ok := in.GetATime(); ok {
		c.Atime, changed = &at, true
	}
	if _, ok := in.GetSize(); !ok {
		// Every setattr but a truncate's is a change: chown(f, -1, -1)
		// changes nothing but the ctime, which SetAttr stamps, as ext4
		// does. The kernel says so with FATTR_CTIME only when it caches
		// writes, and sends no attribute at all otherwise.
		changed = true
	}
	if !changed {
		fi, err := n.fsys.s.StatIno(n.ino.Load())
		return fi, n.stale("getattr", err)
	}
	fi, err := n.fsys.s.SetAttr(n.ino.Load(), c)
	return fi, n.stale("setattr", err)
}
