package poolfs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	kvfs "github.com/kvfs/kvfs/fs"
	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
)

// /.kvfs on a pool mount is the local mount's tree (docs/MOUNT.md), served
// from the pool:
//
//   - stats: this host's pool figures (known chunks, its chunk cache) and
//     the pool's names, as JSON;
//   - match/<hex h(k)>: a symbolic link to the snapshot that holds the
//     prefix h(k) names (Pool.MatchKey), with the link's attributes
//     kvfs.tokens and kvfs.snapshot_tokens under trusted.* and security.*;
//   - candidates/<hex h(k)>/: the snapshots indexed under h(k), as links
//     named by the revision at which their names were published (the
//     earliest wins a tie), so that kvfs match --mount gives kvfs match
//     --pool's answer;
//   - prefix/<path>@<N>: the snapshot or llama.cpp state file <path> cut
//     to its first N tokens, a map of the original's bytes (mlx.PrefixView,
//     llamastate.Trim);
//   - whole/<path>: any file as a whole-layout file: a blocks-layout
//     snapshot assembled from its directory's blocks/ (mlx.WholeView),
//     any other file as it is.
//
// The tree's directories are the daemon's, 0555, and its links 0777; a
// view carries its original's owner and mode (pool.Owner) without the
// write bits, and the kernel checks them (default_permissions); a key of
// match or candidates answers a caller only with the snapshots it may
// read (fsys.mayRead), as on a local mount. A view is made at its
// lookup from the version of the file its name points to then, and reads
// that version: a file published again under the name is another view at
// the next lookup.

// noCache is the kernel's lifetime of the tree's answers that depend on
// the caller or change on every host: the shortest it takes (go-fuse
// turns 0 into the mount's default, a second).
const noCache = time.Nanosecond

// ctlName is the tree's name at the mount's root; no file or directory of
// the pool is reached by it there.
const ctlName = ".kvfs"

// ctlDir is /.kvfs.
type ctlDir struct {
	gofs.Inode
	fsys *fsys
}

func (d *ctlDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	return 0
}

// ctlAttr fills a tree entry's attributes: the daemon's, mode m.
func (f *fsys) ctlAttr(a *fuse.Attr, m uint32) {
	a.Mode = m
	a.Nlink = 1
	if m&syscall.S_IFMT == syscall.S_IFDIR {
		a.Nlink = 2
	}
	a.Uid, a.Gid = f.uid, f.gid
	a.SetTimes(&f.started, &f.started, &f.started)
}

var ctlEntries = []fuse.DirEntry{
	{Name: "stats", Mode: syscall.S_IFREG},
	{Name: "match", Mode: syscall.S_IFDIR},
	{Name: "candidates", Mode: syscall.S_IFDIR},
	{Name: "prefix", Mode: syscall.S_IFDIR},
	{Name: "whole", Mode: syscall.S_IFDIR},
}

func (d *ctlDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(ctlEntries), 0
}

func (d *ctlDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	var op gofs.InodeEmbedder
	mode := uint32(syscall.S_IFDIR | 0o555)
	switch name {
	case "stats":
		st, e := d.fsys.stats(ctx)
		if e != 0 {
			return nil, e
		}
		d.fsys.ctlAttr(&out.Attr, syscall.S_IFREG|0o444)
		out.Attr.Size = uint64(len(st))
		out.SetAttrTimeout(noCache)
		return d.NewInode(ctx, &statsFile{fsys: d.fsys}, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
	case "match":
		op = &matchDir{fsys: d.fsys}
	case "candidates":
		op = &candidatesDir{fsys: d.fsys}
	case "prefix":
		op = &viewDir{fsys: d.fsys, prefix: true}
	case "whole":
		op = &viewDir{fsys: d.fsys}
	default:
		return nil, syscall.ENOENT
	}
	d.fsys.ctlAttr(&out.Attr, mode)
	return d.NewInode(ctx, op, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// poolStats is /.kvfs/stats.
type poolStats struct {
	Names       int             `json:"names"`
	KnownChunks int             `json:"knownChunks"`
	Cache       pool.CacheStats `json:"cache"`
}

// stats is /.kvfs/stats's content now.
func (f *fsys) stats(ctx context.Context) ([]byte, syscall.Errno) {
	names, e := f.list()
	if e != 0 {
		return nil, e
	}
	st := f.opts.Pool.Stats()
	b, err := json.MarshalIndent(poolStats{Names: len(names), KnownChunks: st.KnownChunks, Cache: st.Cache}, "", "  ")
	if err != nil {
		return nil, syscall.EIO
	}
	return append(b, '\n'), 0
}

// statsFile is /.kvfs/stats: read whole at each open.
type statsFile struct {
	gofs.Inode
	fsys *fsys
}

func (s *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	b, e := s.fsys.stats(ctx)
	if e != 0 {
		return e
	}
	s.fsys.ctlAttr(&out.Attr, syscall.S_IFREG|0o444)
	out.Attr.Size = uint64(len(b))
	out.SetTimeout(noCache)
	return 0
}

func (s *statsFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EACCES
	}
	b, e := s.fsys.stats(ctx)
	if e != 0 {
		return nil, 0, e
	}
	return bytesHandle(b), fuse.FOPEN_DIRECT_IO, 0
}

// bytesHandle reads a byte slice.
type bytesHandle []byte

func (h bytesHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h[off:min(int64(len(h)), off+int64(len(dest)))]), 0
}

// matchDir is /.kvfs/match: keys are looked up, not listed.
type matchDir struct {
	gofs.Inode
	fsys *fsys
}

func (d *matchDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	return 0
}

func (d *matchDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(nil), 0
}

func (d *matchDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	key, ok := kvfs.ParseKey(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	l := &matchLink{fsys: d.fsys, key: key}
	r, e := l.resolve(ctx)
	if e != 0 {
		return nil, e
	}
	// Not kept by the kernel: snapshots come and go on every host.
	out.SetEntryTimeout(noCache)
	out.SetAttrTimeout(noCache)
	l.attr(r, &out.Attr)
	return d.NewInode(ctx, l, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
}

// matchLink is /.kvfs/match/<hex>: each use asks the pool again.
type matchLink struct {
	gofs.Inode
	fsys *fsys
	key  mlx.ChainKey
}

func (l *matchLink) resolve(ctx context.Context) (*store.MatchResult, syscall.Errno) {
	r, err := l.fsys.opts.Pool.MatchKey(uninterrupted(ctx), l.key, func(c pool.Candidate) bool { return l.fsys.mayRead(ctx, c.Owner) })
	if err != nil {
		return nil, errno(l.fsys.opts.Logger, "match", err)
	}
	return r, 0
}

func (l *matchLink) attr(r *store.MatchResult, a *fuse.Attr) {
	l.fsys.ctlAttr(a, syscall.S_IFLNK|0o777)
	a.Size = uint64(len("../../" + r.Path))
}

func (l *matchLink) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r, e := l.resolve(ctx)
	if e != 0 {
		return e
	}
	l.attr(r, &out.Attr)
	out.SetTimeout(noCache)
	return 0
}

func (l *matchLink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	r, e := l.resolve(ctx)
	if e != 0 {
		return nil, e
	}
	return []byte("../../" + r.Path), 0
}

// The link's attributes, as on a local mount (Linux answers user.* of a
// link itself): the tokens the prefix reuses, and the snapshot's own.
const (
	matchTokensAttr   = "kvfs.tokens"
	matchSnapshotAttr = "kvfs.snapshot_tokens"
)

func (l *matchLink) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ns, name, _ := strings.Cut(attr, ".")
	if ns != "trusted" && ns != "security" || name != matchTokensAttr && name != matchSnapshotAttr {
		return 0, syscall.ENODATA
	}
	r, e := l.resolve(ctx)
	if e != 0 {
		return 0, e
	}
	v := r.Tokens
	if name == matchSnapshotAttr {
		v = r.SnapshotTokens
	}
	b := strconv.AppendInt(nil, v, 10)
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

func (l *matchLink) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	var b []byte
	for _, ns := range []string{"trusted.", "security."} {
		for _, n := range []string{matchTokensAttr, matchSnapshotAttr} {
			b = append(append(b, ns+n...), 0)
		}
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

// candidatesDir is /.kvfs/candidates: keys are looked up, not listed.
type candidatesDir struct {
	gofs.Inode
	fsys *fsys
}

func (d *candidatesDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	return 0
}

func (d *candidatesDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(nil), 0
}

func (d *candidatesDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	key, ok := kvfs.ParseKey(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	k := &keyDir{fsys: d.fsys, key: key}
	cs, e := k.candidates(ctx)
	if e != 0 {
		return nil, e
	}
	if len(cs) == 0 {
		return nil, syscall.ENOENT
	}
	out.SetEntryTimeout(noCache)
	out.SetAttrTimeout(noCache)
	d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	return d.NewInode(ctx, k, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// keyDir is /.kvfs/candidates/<hex>: a link per candidate, named by the
// etcd revision its name was published at.
type keyDir struct {
	gofs.Inode
	fsys *fsys
	key  mlx.ChainKey
}

func (k *keyDir) candidates(ctx context.Context) ([]pool.Candidate, syscall.Errno) {
	cs, err := k.fsys.opts.Pool.Candidates(uninterrupted(ctx), k.key)
	if err != nil {
		return nil, errno(k.fsys.opts.Logger, "candidates", err)
	}
	return slices.DeleteFunc(cs, func(c pool.Candidate) bool { return !k.fsys.mayRead(ctx, c.Owner) }), 0
}

// mayRead reports whether a request's caller may read a file of owner o
// (nil: the daemon's, 0644): a key of the tree answers a caller only with
// the files it may read, as on a local mount.
func (f *fsys) mayRead(ctx context.Context, o *pool.Owner) bool {
	uid, gid, mode := f.uid, f.gid, uint32(0o644)
	if o != nil {
		uid, gid, mode = o.Uid, o.Gid, o.Mode
	}
	return kvfs.CallerCred(ctx).CanRead(iofs.FileMode(mode&0o777), uid, gid)
}

func (k *keyDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	k.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	out.SetTimeout(noCache)
	return 0
}

func (k *keyDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	cs, e := k.candidates(ctx)
	if e != 0 {
		return nil, e
	}
	ents := make([]fuse.DirEntry, len(cs))
	for i, c := range cs {
		ents[i] = fuse.DirEntry{Name: strconv.FormatInt(c.Created, 10), Mode: syscall.S_IFLNK}
	}
	return gofs.NewListDirStream(ents), 0
}

func (k *keyDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	cs, e := k.candidates(ctx)
	if e != 0 {
		return nil, e
	}
	for _, c := range cs {
		if strconv.FormatInt(c.Created, 10) == name {
			target := "../../../" + c.Path
			k.fsys.ctlAttr(&out.Attr, syscall.S_IFLNK|0o777)
			out.Attr.Size = uint64(len(target))
			out.SetEntryTimeout(noCache)
			out.SetAttrTimeout(noCache)
			return k.NewInode(ctx, &gofs.MemSymlink{Data: []byte(target)}, gofs.StableAttr{Mode: syscall.S_IFLNK}), 0
		}
	}
	return nil, syscall.ENOENT
}

// viewDir is a directory of /.kvfs/prefix (prefix) or /.kvfs/whole: the
// pool's directory path, mirrored. A directory of /.kvfs/prefix lists its
// subdirectories only (a view is reached by name@N).
type viewDir struct {
	gofs.Inode
	fsys   *fsys
	path   string
	prefix bool
}

func (d *viewDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	return 0
}

func (d *viewDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	names, e := d.fsys.list()
	if e != 0 {
		return nil, e
	}
	ents := children(names, d.path)
	if d.prefix {
		ents = slices.DeleteFunc(ents, func(e fuse.DirEntry) bool { return e.Mode != syscall.S_IFDIR })
	}
	return gofs.NewListDirStream(ents), 0
}

func (d *viewDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	p := join(d.path, name)
	file, dir, e := d.fsys.kind(p)
	if e != 0 {
		return nil, e
	}
	if dir {
		d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
		return d.NewInode(ctx, &viewDir{fsys: d.fsys, path: p, prefix: d.prefix}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	var n int64
	if d.prefix {
		base, tokens, err := kvfs.SplitPrefixName(name)
		if err != nil {
			d.fsys.opts.Logger.Info("no prefix view", "view", p, "reason", err)
			return nil, syscall.ENOENT
		}
		p, n = join(d.path, base), tokens
		if file, _, e = d.fsys.kind(p); e != 0 {
			return nil, e
		}
	}
	if !file {
		return nil, syscall.ENOENT
	}
	v, e := d.fsys.view(ctx, p, n)
	if e != 0 {
		return nil, e
	}
	vf := &viewFile{fsys: d.fsys, v: v}
	vf.attr(&out.Attr)
	return d.NewInode(ctx, vf, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
}

// view is one view's bytes: size of them, read by readAt from the pool
// files it maps (sources: the original, at the version found at the
// view's lookup, and the blocks of its directory's blocks/).
type view struct {
	owner    *pool.Owner // the original's (nil: the daemon's, 0644)
	size     int64
	readAt   func(src *sources, p []byte, off int64) (int, error)
	path     string   // the original's
	manifest string   // its version
	blocks   []string // the blocks it reads, of its directory's blocks/
}

// sources are the pool files a view reads, opened at its first read of
// each.
type sources struct {
	fsys *fsys
	v    *view
	mu   sync.Mutex
	open map[string]*pool.File
}

// get returns the pool file of source name ("" the original, else a
// block hash).
func (s *sources) get(ctx context.Context, name string) (*pool.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.open[name]; ok {
		return f, nil
	}
	var f *pool.File
	var err error
	if name == "" {
		f, err = s.fsys.opts.Pool.OpenVersion(ctx, s.v.manifest, s.v.path)
	} else {
		f, err = s.fsys.opts.Pool.Open(ctx, path.Join(path.Dir(s.v.path), "blocks", name))
	}
	if err != nil {
		return nil, err
	}
	if s.open == nil {
		s.open = map[string]*pool.File{}
	}
	s.open[name] = f
	return f, nil
}

// OpenSource implements mlx.ViewSource for the views' planning.
func (s *sources) OpenSource(block string) (io.ReaderAt, int64, error) {
	f, err := s.get(context.Background(), block)
	if err != nil {
		return nil, 0, err
	}
	return f, f.Size(), nil
}

// OpenBlock implements mlx.BlockSource for whole views of blocks-layout
// snapshots.
func (s *sources) OpenBlock(hash string) (io.ReadCloser, error) {
	f, err := s.get(context.Background(), hash)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(io.NewSectionReader(f, 0, f.Size())), nil
}

// view makes the view of pool file p cut to n tokens (n = 0: its whole
// view). A file that is no snapshot, or an n its format does not allow,
// is ENOENT, with the reason logged.
func (f *fsys) view(ctx context.Context, p string, n int64) (*view, syscall.Errno) {
	ver, err := f.resolve(p)
	if e := errno(f.opts.Logger, "view "+p, err); e != 0 {
		return nil, e
	}
	// A view reads the original: the caller must be allowed to, before
	// its header is even read (its token count, whether it is a
	// snapshot: a private file's name must tell nothing more).
	if !f.mayRead(ctx, ver.owner) {
		return nil, syscall.EACCES
	}
	v := &view{path: p, manifest: ver.manifest, size: ver.size, owner: ver.owner}
	src := &sources{fsys: f, v: v}
	orig, err := src.get(uninterrupted(ctx), "")
	if err != nil {
		return nil, errno(f.opts.Logger, "view "+p, err)
	}
	whole := func(s *sources, b []byte, off int64) (int, error) {
		o, err := s.get(context.Background(), "")
		if err != nil {
			return 0, err
		}
		return o.ReadAt(b, off)
	}
	refuse := func(err error) (*view, syscall.Errno) {
		if errors.Is(err, syscall.EIO) {
			return nil, errno(f.opts.Logger, "view "+p, err)
		}
		f.opts.Logger.Info("no view", "path", p, "tokens", n, "reason", err)
		return nil, syscall.ENOENT
	}
	var head [16]byte
	k, _ := orig.ReadAt(head[:min(int64(len(head)), orig.Size())], 0)
	if n == 0 && !bytes.HasPrefix(head[:k], []byte(mlx.Magic)) {
		v.readAt = whole // any file but a blocks-layout snapshot is its own whole view
		return v, 0
	}
	if llamastate.Sniff(head[:k]) {
		lf, err := llamastate.Parse(orig, orig.Size(), p)
		if err != nil {
			return refuse(err)
		}
		if n == 0 {
			v.readAt = whole
			return v, 0
		}
		lv, err := llamastate.Trim(lf, orig, n)
		if err != nil {
			return refuse(err)
		}
		v.size = lv.Size
		v.readAt = func(s *sources, b []byte, off int64) (int, error) {
			o, err := s.get(context.Background(), "")
			if err != nil {
				return 0, err
			}
			return lv.ReadAt(o, b, off)
		}
		return v, 0
	}
	snap, err := mlx.Parse(orig, orig.Size(), p)
	if n == 0 && (err != nil || !snap.Blocks()) {
		v.readAt = whole
		return v, 0
	}
	if err != nil {
		return refuse(err)
	}
	if n == 0 && !snap.Blocks() {
		v.readAt = whole
		return v, 0
	}
	if snap.Blocks() {
		// ... and its blocks, each of which may have another owner.
		seen := map[string]bool{}
		for _, t := range snap.Header.Slots() {
			for _, b := range t.Blocks {
				if !seen[b.Hash] {
					seen[b.Hash] = true
					v.blocks = append(v.blocks, b.Hash)
				}
			}
		}
		if e := f.mayReadBlocks(ctx, v); e != 0 {
			return nil, e
		}
	}
	var pieces func(off, n int64) []mlx.ViewPiece
	var prefix []byte
	if n == 0 {
		wv, err := mlx.NewWholeView(uninterrupted(ctx), snap, src)
		if err != nil {
			return refuse(err)
		}
		v.size, prefix = wv.Size, wv.Prefix
		pieces = func(off, k int64) []mlx.ViewPiece {
			var out []mlx.ViewPiece
			for _, pc := range wv.Pieces(off, k) {
				out = append(out, mlx.ViewPiece{FileOff: pc.FileOff, Len: pc.Len, Prefix: pc.Block == "" && !pc.Zero,
					Zero: pc.Zero, Block: pc.Block, SrcOff: pc.BlockOff})
			}
			return out
		}
	} else {
		pv, err := mlx.NewPrefixView(uninterrupted(ctx), snap, n, src)
		if err != nil {
			return refuse(err)
		}
		v.size, prefix, pieces = pv.Size, pv.Prefix, pv.Pieces
	}
	v.readAt = func(s *sources, b []byte, off int64) (int, error) {
		done := 0
		for _, pc := range pieces(off, int64(len(b))) {
			dst := b[pc.FileOff-off : pc.FileOff-off+pc.Len]
			switch {
			case pc.Prefix:
				copy(dst, prefix[pc.FileOff:])
			case pc.Zero:
				clear(dst)
			default:
				o, err := s.get(context.Background(), pc.Block)
				if err != nil {
					return done, err
				}
				if k, err := o.ReadAt(dst, pc.SrcOff); k < len(dst) {
					if err == nil {
						err = io.ErrUnexpectedEOF
					}
					return done, fmt.Errorf("%s: source changed under the view: %w", p, err)
				}
			}
			done += int(pc.Len)
		}
		if done < len(b) {
			return done, io.EOF
		}
		return done, nil
	}
	return v, 0
}

// mayReadBlocks says whether the caller may read every block of view v
// (EACCES if not): a view of a blocks-layout snapshot would otherwise
// hand out bytes of blocks the caller may not read, under the mode of the
// manifest that lists them.
func (f *fsys) mayReadBlocks(ctx context.Context, v *view) syscall.Errno {
	if len(v.blocks) == 0 {
		return 0
	}
	dir := path.Join(path.Dir(v.path), "blocks") + "/"
	if path.Dir(v.path) == "." {
		dir = "blocks/"
	}
	owners, err := f.opts.Pool.Owners(uninterrupted(ctx), dir)
	if err != nil {
		return errno(f.opts.Logger, "view "+v.path, err)
	}
	for _, b := range v.blocks {
		if !f.mayRead(ctx, owners[dir+b]) {
			f.opts.Logger.Info("no view: a block the caller may not read", "path", v.path, "block", b)
			return syscall.EACCES
		}
	}
	return 0
}

// viewFile is a file of /.kvfs/prefix or /.kvfs/whole.
type viewFile struct {
	gofs.Inode
	fsys *fsys
	v    *view
}

// attr is a view's attributes: its original's owner and mode, without
// the write bits, so that the kernel lets read it whoever may read the
// original (default_permissions), no one else.
func (vf *viewFile) attr(a *fuse.Attr) {
	vf.fsys.fileAttr(a, vf.v.size, vf.v.owner)
	a.Mode &^= 0o222
}

func (vf *viewFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	vf.attr(&out.Attr)
	return 0
}

func (vf *viewFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		return nil, 0, syscall.EACCES
	}
	// The kernel checked the original's mode; the blocks are checked for
	// this opener (the kernel's entry may be another user's lookup).
	if e := vf.fsys.mayReadBlocks(ctx, vf.v); e != 0 {
		return nil, 0, e
	}
	return &viewHandle{fsys: vf.fsys, v: vf.v, src: &sources{fsys: vf.fsys, v: vf.v}}, fuse.FOPEN_KEEP_CACHE, 0
}

// viewHandle reads a view; its sources are opened at its first read.
type viewHandle struct {
	fsys *fsys
	v    *view
	src  *sources
}

func (h *viewHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= h.v.size {
		return fuse.ReadResultData(nil), 0
	}
	dest = dest[:min(int64(len(dest)), h.v.size-off)]
	n, err := h.v.readAt(h.src, dest, off)
	if err != nil && n < len(dest) {
		return nil, errno(h.fsys.opts.Logger, "read "+path.Join(ctlName, h.v.path), err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}
