package fs

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// /.kvfs/match/<hex h(k)> is a symbolic link to the snapshot that holds
// the prefix the token-chain key h(k) names (docs/PREFIX.md): relative to
// the link, so that it resolves inside this mount wherever it is mounted.
// Its extended attributes say how many tokens the prefix reuses and the
// snapshot's own length. The directory cannot be listed (keys are
// computed, not browsed), and a key answers only for snapshots the caller
// may read: for any other caller it does not exist.

const ctlMatchIno = ctlIno + 4

// Extended attributes of a match link. Linux refuses user.* attributes on
// symbolic links (getxattr answers ENODATA without asking the
// filesystem), so the link answers them under security.*, which the kernel
// passes on for every caller, and trusted.* (root only). Following the
// link, user.kvfs.tokens is the snapshot's own token count.
const (
	matchTokensAttr   = "kvfs.tokens"          // tokens the prefix reuses: 256k
	matchSnapshotAttr = "kvfs.snapshot_tokens" // the snapshot's own token count
)

// matchDir is /.kvfs/match.
type matchDir struct {
	gofs.Inode
	fsys *FS
}

func (d *matchDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
}

func (d *matchDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(dotEntries(&d.Inode, 0)), 0
}

// ParseKey reads a link name: 64 lowercase hex digits.
func ParseKey(name string) (mlx.ChainKey, bool) {
	var k mlx.ChainKey
	if len(name) != 2*len(k) || strings.ToLower(name) != name {
		return k, false
	}
	_, err := hex.Decode(k[:], []byte(name))
	return k, err == nil
}

func (d *matchDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	// Not cached: snapshots come and go, and the answer depends on who asks.
	out.SetEntryTimeout(entryTimeout)
	out.SetAttrTimeout(entryTimeout)
	key, ok := ParseKey(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	r, err := d.fsys.s.MatchKey(key, cred(ctx))
	if err != nil {
		return nil, d.fsys.errno("match", err)
	}
	l := &matchLink{fsys: d.fsys, key: key}
	l.attr(r, &out.Attr)
	return d.NewInode(ctx, l, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
}

// matchLink is one /.kvfs/match/<hex> link. Each use asks the store
// again, as the caller: the snapshot that holds a prefix changes as
// snapshots are written and removed.
type matchLink struct {
	gofs.Inode
	fsys *FS
	key  mlx.ChainKey
}

func (l *matchLink) resolve(ctx context.Context) (*store.MatchResult, syscall.Errno) {
	r, err := l.fsys.s.MatchKey(l.key, cred(ctx))
	if err != nil {
		return nil, l.fsys.errno("match", err)
	}
	return r, 0
}

// target is the link's content: up from /.kvfs/match to the mount's root.
func target(r *store.MatchResult) string { return "../../" + r.Path }

func (l *matchLink) attr(r *store.MatchResult, a *fuse.Attr) {
	l.fsys.ctlAttr(a, syscall.S_IFLNK|0o777)
	a.Size = uint64(len(target(r)))
}

func (l *matchLink) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r, e := l.resolve(ctx)
	if e != 0 {
		return e
	}
	l.attr(r, &out.Attr)
	out.SetTimeout(entryTimeout)
	return 0
}

func (l *matchLink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	r, e := l.resolve(ctx)
	if e != 0 {
		return nil, e
	}
	return []byte(target(r)), 0
}

// matchAttrNames are the link's attributes, in the namespaces a caller can
// read on a link (not user.*, which Linux answers ENODATA itself).
var matchAttrNames = func() []string {
	var out []string
	for _, ns := range []string{"trusted.", "security."} {
		out = append(out, ns+matchTokensAttr, ns+matchSnapshotAttr)
	}
	return out
}()

func (l *matchLink) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	_, name, ok := strings.Cut(attr, ".")
	if !ok || (name != matchTokensAttr && name != matchSnapshotAttr) {
		return 0, hostPlatform().noAttr
	}
	r, e := l.resolve(ctx)
	if e != 0 {
		return 0, e
	}
	v := r.Tokens
	if name == matchSnapshotAttr {
		v = r.SnapshotTokens
	}
	return copyOut([]byte(fmt.Sprint(v)), dest)
}

func (l *matchLink) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if _, e := l.resolve(ctx); e != 0 {
		return 0, e
	}
	var b []byte
	for _, n := range matchAttrNames {
		b = append(append(b, n...), 0)
	}
	return copyOut(b, dest)
}

var (
	_ gofs.NodeLookuper    = (*matchDir)(nil)
	_ gofs.NodeReaddirer   = (*matchDir)(nil)
	_ gofs.NodeReadlinker  = (*matchLink)(nil)
	_ gofs.NodeGetxattrer  = (*matchLink)(nil)
	_ gofs.NodeListxattrer = (*matchLink)(nil)
	_ gofs.NodeGetattrer   = (*matchLink)(nil)
)
