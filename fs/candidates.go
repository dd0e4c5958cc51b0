package fs

import (
	"context"
	"strconv"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/mlx"
)

// /.kvfs/candidates/<hex h(k)>/ lists every snapshot indexed under the
// prefix key h(k) (k ≥ 1) that the caller may read, usable or not, as
// symbolic links named by the snapshot's inode number (the earliest
// committed sorts first as a number) that lead to it (docs/PREFIX.md).
// /.kvfs/match/<hex> gives one answer per key; which snapshot best seeds a
// prompt depends on the tokens past the key, so a client that wants the
// control socket's answer lists its longest key's candidates, reads their
// headers and judges them (store.Rejection, store.Better), as kvfs match
// --mount does. /.kvfs/candidates itself cannot be listed.

const (
	ctlCandidatesIno  = ctlIno + 5
	ctlCandidateLinks = ctlIno + 3<<40 // + the snapshot's inode: its link
)

// candidatesDir is /.kvfs/candidates.
type candidatesDir struct {
	gofs.Inode
	fsys *FS
}

func (d *candidatesDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
}

func (d *candidatesDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(dotEntries(&d.Inode, 0)), 0
}

func (d *candidatesDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	// Not cached for long: snapshots come and go, and the answer depends
	// on who asks.
	out.SetEntryTimeout(entryTimeout)
	out.SetAttrTimeout(entryTimeout)
	key, ok := ParseKey(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if !d.fsys.s.HasCandidates(key, cred(ctx)) {
		return nil, syscall.ENOENT
	}
	if e := d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555); e != 0 {
		return nil, e
	}
	return d.NewInode(ctx, &keyCandidates{fsys: d.fsys, key: key}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// keyCandidates is /.kvfs/candidates/<hex>: listed and looked up as the
// caller, each time.
type keyCandidates struct {
	gofs.Inode
	fsys *FS
	key  mlx.ChainKey
}

// Getattr answers only a caller for whom the directory exists: the kernel
// may send another user's stat here, without a lookup, while it holds the
// entry that one caller's lookup made (red team 12), and that the
// directory exists tells that some snapshot begins with the key's tokens.
func (d *keyCandidates) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !d.fsys.s.HasCandidates(d.key, cred(ctx)) {
		return syscall.ENOENT
	}
	out.SetTimeout(entryTimeout)
	return d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
}

func (d *keyCandidates) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	cs, err := d.fsys.s.MatchCandidates(d.key, cred(ctx))
	if err != nil {
		return nil, d.fsys.errno("candidates", err)
	}
	ents := dotEntries(&d.Inode, len(cs))
	for _, c := range cs {
		ents = append(ents, fuse.DirEntry{Name: strconv.FormatUint(c.Ino, 10), Mode: syscall.S_IFLNK, Ino: ctlCandidateLinks + c.Ino})
	}
	return gofs.NewListDirStream(ents), 0
}

// parseIno reads a candidate's name: an inode number in canonical decimal.
func parseIno(name string) (uint64, bool) {
	ino, err := strconv.ParseUint(name, 10, 40)
	return ino, err == nil && ino != 0 && strconv.FormatUint(ino, 10) == name
}

func (d *keyCandidates) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	out.SetEntryTimeout(entryTimeout)
	out.SetAttrTimeout(entryTimeout)
	ino, ok := parseIno(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	p, err := d.fsys.s.MatchCandidateAt(d.key, ino, cred(ctx))
	if err != nil {
		return nil, d.fsys.errno("candidates", err)
	}
	l := &candidateLink{fsys: d.fsys, ino: ino}
	l.attr(p, &out.Attr)
	return d.NewInode(ctx, l, gofs.StableAttr{Mode: syscall.S_IFLNK, Ino: ctlCandidateLinks + ino}), 0
}

// candidateLink leads to one snapshot, from any key's directory (one
// inode per snapshot): ../../../<path>, resolved again at each use, as the
// caller.
type candidateLink struct {
	gofs.Inode
	fsys *FS
	ino  uint64
}

func (l *candidateLink) path(ctx context.Context) (string, syscall.Errno) {
	p, err := l.fsys.s.SnapshotPath(l.ino, cred(ctx))
	if err != nil {
		return "", l.fsys.errno("candidates", err)
	}
	return "../../../" + p, 0
}

func (l *candidateLink) attr(p string, a *fuse.Attr) {
	l.fsys.ctlAttr(a, syscall.S_IFLNK|0o777)
	a.Ino = ctlCandidateLinks + l.ino
	a.Size = uint64(len("../../../" + p))
}

func (l *candidateLink) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	p, err := l.fsys.s.SnapshotPath(l.ino, cred(ctx))
	if err != nil {
		return l.fsys.errno("candidates", err)
	}
	l.attr(p, &out.Attr)
	out.SetTimeout(entryTimeout)
	return 0
}

func (l *candidateLink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, e := l.path(ctx)
	if e != 0 {
		return nil, e
	}
	return []byte(t), 0
}

var (
	_ gofs.NodeLookuper   = (*candidatesDir)(nil)
	_ gofs.NodeReaddirer  = (*candidatesDir)(nil)
	_ gofs.NodeLookuper   = (*keyCandidates)(nil)
	_ gofs.NodeReaddirer  = (*keyCandidates)(nil)
	_ gofs.NodeReadlinker = (*candidateLink)(nil)
	_ gofs.NodeGetattrer  = (*candidateLink)(nil)
)
