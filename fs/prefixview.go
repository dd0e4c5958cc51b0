package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// /.kvfs/prefix/<path>@<N> is the snapshot <path> cut to its first N
// tokens (mlx.Trim), as a whole-layout file served from the original's
// bytes: its own file for a whole-layout snapshot, its blocks for a
// blocks-layout one. No chunk is written to make a view; its tensor hashes
// are computed at its first open and kept in the FS's prefixViews, keyed
// by the original's version (inode and manifest ID), N and the directory
// whose blocks/ it reads, so a rewrite, removal or rename of the original
// is never answered with an old view.
//
// The directories of /.kvfs/prefix mirror the store's, as /.kvfs/whole's
// do, with the same permission checks (mirrorDir with prefix set); a file
// is reached only by name@N, the last '@' separating N, so names holding
// '@' work. An N that the snapshot's kinds do not allow (FORMAT.md §7: a
// non-trimmable kind, more tokens than it holds, below
// minimumReusableOffset), N = 0, a malformed N, or a file that is not a
// snapshot is ENOENT, with the reason logged.

// Inode numbers of the prefix tree: /.kvfs/prefix, its directories (by
// store inode) and its views (by store inode and N, when they fit; go-fuse
// numbers the others).
const (
	ctlPrefixDirs  = ctlIno + 2<<40
	ctlPrefixFiles = ctlIno + 1<<61
	prefixNBits    = 21
)

func prefixViewIno(ino uint64, n int64) uint64 {
	if ino >= 1<<40 || n >= 1<<prefixNBits {
		return 0
	}
	return ctlPrefixFiles + ino<<prefixNBits + uint64(n)
}

// SplitPrefixName splits name@N at its last '@'. N is a positive decimal
// without sign or leading zeros: one name per view.
func SplitPrefixName(name string) (string, int64, error) {
	i := strings.LastIndexByte(name, '@')
	if i <= 0 {
		return "", 0, fmt.Errorf("%q has no @N token count", name)
	}
	s := name[i+1:]
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || s[0] == '0' || s[0] == '+' || n <= 0 {
		return "", 0, fmt.Errorf("%q: token count %q is not a positive decimal", name, s)
	}
	return name[:i], n, nil
}

// refusedView is a view that does not exist: ENOENT, with why.
type refusedView struct {
	path string
	err  error
}

func (e *refusedView) Error() string { return fmt.Sprintf("prefix view %s: %v", e.path, e.err) }
func (e *refusedView) Unwrap() error { return e.err }

// refuse logs why a view does not exist (at a bounded rate: logLimit)
// and answers ENOENT.
func (fsys *FS) refuse(e *refusedView) syscall.Errno {
	if ok, dropped := fsys.refusals.allow(time.Now()); ok {
		if dropped > 0 {
			fsys.log.Info("no prefix view", "view", e.path, "reason", e.err, "not_logged_before", dropped)
		} else {
			fsys.log.Info("no prefix view", "view", e.path, "reason", e.err)
		}
	}
	return syscall.ENOENT
}

// lookupPrefix looks name up in a directory of /.kvfs/prefix, after the
// caller's search permission was checked: a directory of that name, or a
// view name@N.
func (d *mirrorDir) lookupPrefix(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if fi, err := d.fsys.s.LookupAttr(d.ino, name); err == nil && fi.IsDir() {
		fillAttr(fi, &out.Attr)
		md := &mirrorDir{fsys: d.fsys, ino: fi.Ino, prefix: true}
		return d.NewInode(ctx, md, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlPrefixDirs + fi.Ino}), 0
	}
	base, n, err := SplitPrefixName(name)
	if err != nil {
		return nil, d.fsys.refuse(&refusedView{path: name, err: err})
	}
	fi, err := d.fsys.lookupLeased(ctx, d.ino, base)
	if err != nil {
		return nil, d.fsys.lookupErrno(err)
	}
	if fi.IsDir() {
		return nil, d.fsys.refuse(&refusedView{path: fi.Path + "@" + strconv.FormatInt(n, 10), err: errors.New("a directory")})
	}
	// Reading the view reads the original: the caller must be allowed
	// to, before its header is even parsed.
	if err := d.fsys.s.MayOpen(fi.Ino, cred(ctx)); err != nil {
		return nil, d.fsys.denied("lookup", err)
	}
	p := &prefixFile{fsys: d.fsys, ino: fi.Ino, n: n, found: fi}
	v, fi, err := p.resolve(ctx, d, fi)
	if err != nil {
		return nil, p.viewErrno(err)
	}
	p.attr(v, fi, &out.Attr)
	ino := prefixViewIno(fi.Ino, n)
	d.fsys.walks.looked(ctx, ino)
	return d.NewInode(ctx, p, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0
}

// prefixFile is one view name@N: the version of the original its name led
// to when it was looked up, cut to n tokens.
type prefixFile struct {
	gofs.Inode
	fsys *FS
	ino  uint64 // the original's version
	n    int64
	// found is the version as its lookup found it, leased (lease) so
	// that the open after the lookup finds it even if the original is
	// replaced in between.
	found *store.FileInfo
}

// view returns the view, or a goneError once the original's name leads
// elsewhere (the kernel then looks the name up again).
func (p *prefixFile) view(ctx context.Context) (*mlx.PrefixView, *store.FileInfo, error) {
	up, name := placeOf(&p.Inode)
	if up == nil {
		return nil, nil, &goneError{fmt.Errorf("prefix view of inode %d: %w", p.ino, iofs.ErrNotExist)}
	}
	if err := up.valid(); err != nil {
		return nil, nil, err
	}
	base, _, err := SplitPrefixName(name)
	if err != nil {
		return nil, nil, &goneError{fmt.Errorf("%v: %w", err, iofs.ErrNotExist)}
	}
	fi, err := p.fsys.s.Lookup(up.ino, base)
	if err == nil && fi.Ino != p.ino {
		err = fmt.Errorf("%q now names inode %d, not %d: %w", base, fi.Ino, p.ino, iofs.ErrNotExist)
	}
	if err != nil {
		return nil, nil, &goneError{err}
	}
	return p.resolve(ctx, up, fi)
}

// walked is view for a getattr or an open: if the original's name moved
// on since the caller's own lookup of the node, the version that lookup
// found, as an open racing a rename on a disk opens the file its walk
// found (walks). An open forgets the lookup; the kernel's getattr between
// the lookup and the open does not.
func (p *prefixFile) walked(ctx context.Context, open bool) (*mlx.PrefixView, *store.FileInfo, error) {
	v, fi, err := p.view(ctx)
	var gone *goneError
	if p.fsys.walks.recent(ctx, p.StableAttr().Ino, open) && errors.As(err, &gone) {
		if up, _ := placeOf(&p.Inode); up != nil {
			v, fi, err = p.resolve(ctx, up, p.found)
		}
	}
	return v, fi, err
}

// resolve returns the view of version fi, found in directory up, from the
// cache or made now.
func (p *prefixFile) resolve(ctx context.Context, up *mirrorDir, fi *store.FileInfo) (*mlx.PrefixView, *store.FileInfo, error) {
	viewPath := fi.Path + "@" + strconv.FormatInt(p.n, 10)
	if fi.Kind != "mlxkv" && fi.Kind != "llama" {
		return nil, nil, &refusedView{path: viewPath, err: fmt.Errorf("not a snapshot the store indexed (stored as %q)", fi.Kind)}
	}
	key := prefixKey{ino: fi.Ino, manifest: fi.ManifestID, dir: up.ino, n: p.n}
	v, err := p.fsys.prefixViews.do(ctx, key, fi.ID, func() (*mlx.PrefixView, error) {
		f, err := p.fsys.s.OpenIno(fi.Ino)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if fi.Kind == "llama" {
			return llamaView(f, fi.Path, viewPath, p.n)
		}
		snap, err := mlx.Parse(f, f.Size(), fi.Path)
		if err != nil {
			return nil, &refusedView{path: viewPath, err: err}
		}
		// Blocks are read as the caller, as for /.kvfs/whole.
		src := &viewSource{orig: f, blocks: &blockSource{fsys: p.fsys, dir: up.ino, cred: cred(ctx)}}
		defer src.blocks.close()
		// Finished even if the caller is interrupted: it is cached.
		v, err := mlx.NewPrefixView(context.WithoutCancel(ctx), snap, p.n, src)
		switch {
		case errors.Is(err, mlx.ErrNotTrimmable):
			return nil, &refusedView{path: viewPath, err: err}
		case missingBlock(err), errors.Is(err, mlx.ErrMalformed):
			return nil, &brokenViewError{path: fi.Path, err: err}
		}
		return v, err
	})
	if err != nil {
		return nil, nil, err
	}
	return v, fi, nil
}

// viewErrno maps an error of a view: ENOENT (logged) for a view that does
// not exist, ESTALE when the original's version is gone, EIO (logged) for
// a missing block.
func (p *prefixFile) viewErrno(err error) syscall.Errno {
	var refused *refusedView
	if errors.As(err, &refused) {
		return p.fsys.refuse(refused)
	}
	var gone *goneError
	if errors.As(err, &gone) {
		return p.fsys.stale("resolve prefix view", err)
	}
	var broken *brokenViewError
	if errors.As(err, &broken) {
		return p.fsys.brokenView(broken)
	}
	return p.fsys.errno("resolve prefix view", err)
}

// attr is the original's owner and mode without write bits, with the
// view's size.
func (p *prefixFile) attr(v *mlx.PrefixView, fi *store.FileInfo, a *fuse.Attr) {
	fillAttr(fi, a)
	a.Mode = syscall.S_IFREG | unixMode(fi.Mode)&^(syscall.S_IFMT|0o222)
	a.Size = uint64(v.Size)
	a.Blocks = (a.Size + 511) / 512
}

func (p *prefixFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	// An open view (fstat) is the version it holds, even once the
	// original's name leads elsewhere, as an open file on a disk.
	if r, ok := fh.(*prefixReader); ok {
		p.attr(r.v, r.fi, &out.Attr)
		out.SetTimeout(entryTimeout)
		return 0
	}
	v, fi, err := p.walked(ctx, false)
	if err != nil {
		return p.viewErrno(err)
	}
	p.attr(v, fi, &out.Attr)
	out.SetTimeout(entryTimeout)
	return 0
}

func (p *prefixFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if e := p.fsys.mayOpenView(ctx, &p.Inode, p.ino, flags); e != 0 {
		return nil, 0, e
	}
	v, fi, err := p.walked(ctx, true)
	if err != nil {
		return nil, 0, p.viewErrno(err)
	}
	up, _ := placeOf(&p.Inode)
	if up == nil {
		return nil, 0, syscall.ESTALE
	}
	// The open file holds this version of the original while it is read.
	f, err := p.fsys.s.OpenIno(fi.Ino)
	if err != nil {
		return nil, 0, p.fsys.stale("open", err)
	}
	src := &viewSource{orig: f, blocks: &blockSource{fsys: p.fsys, dir: up.ino, cred: cred(ctx)}}
	// Kept pages on every platform, macFUSE included: a prefix view
	// node is one version's prefix (prefixViewIno), which never changes.
	return &prefixReader{v: v, fi: fi, path: fi.Path, src: src}, fuse.FOPEN_KEEP_CACHE, 0
}

func (p *prefixFile) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// viewSource is what a prefix view reads: the original's version and the
// blocks of its directory.
type viewSource struct {
	orig   *store.File
	blocks *blockSource
}

// OpenSource implements mlx.ViewSource.
func (s *viewSource) OpenSource(block string) (io.ReaderAt, int64, error) {
	if block == "" {
		return s.orig, s.orig.Size(), nil
	}
	f, err := s.blocks.file(block)
	if err != nil {
		return nil, 0, fmt.Errorf("block %s: %w", block, err)
	}
	return f, f.Size(), nil
}

// prefixReader reads a view: prefix bytes, the original's bytes, zeros.
type prefixReader struct {
	v    *mlx.PrefixView
	fi   *store.FileInfo // the original's version
	path string
	mu   sync.Mutex // guards src's open blocks
	src  *viewSource
	// ahead prefetches the view's rows ahead of a sequential reader, in
	// the view's own offsets: a row's prefix, not the rest of its row.
	ahead       readAhead
	prefetching sync.WaitGroup
}

func (r *prefixReader) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	pieces := r.v.Pieces(off, int64(len(dest)))
	r.ahead.read(off, len(dest), func(off, n int64) {
		// Off the request's path (as reader.Read); Release waits for it.
		r.prefetching.Add(1)
		go func() {
			defer r.prefetching.Done()
			r.prefetch(off, n)
		}()
	})
	if res := r.splice(pieces); res != nil {
		return res, 0
	}
	n := 0
	for _, p := range pieces {
		b := dest[n : n+int(p.Len)]
		switch {
		case p.Zero:
			clear(b)
		case p.Prefix:
			copy(b, r.v.Prefix[p.FileOff:])
		default:
			r.mu.Lock()
			f, _, err := r.src.OpenSource(p.Block)
			r.mu.Unlock()
			if err == nil {
				_, err = f.ReadAt(b, p.SrcOff)
			}
			if missingBlock(err) {
				return nil, r.src.blocks.fsys.brokenView(&brokenViewError{path: r.path, err: err})
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, r.src.blocks.fsys.errno("read prefix view "+r.path, err)
			}
		}
		n += int(p.Len)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// splice answers a read that lies within one run of a stored file (the
// original or one of its blocks: a trimmed view's row is a run of the
// original's), as a whole file's read is answered: spliced from the packs,
// without copying the bytes through the daemon (issue 28: the view read
// cold at 2.6× the plain file's rows, its bytes copied chunk by chunk).
// It returns nil when the read cannot be spliced; Read then copies. The
// file read stays open until the handle's Release, which the kernel sends
// only after the replies to its reads.
func (r *prefixReader) splice(pieces []mlx.ViewPiece) fuse.ReadResult {
	if len(pieces) != 1 || !r.src.blocks.fsys.splice {
		return nil
	}
	p := pieces[0]
	if p.Zero || p.Prefix {
		return nil
	}
	r.mu.Lock()
	src, _, err := r.src.OpenSource(p.Block)
	r.mu.Unlock()
	f, ok := src.(*store.File)
	if err != nil || !ok || p.SrcOff+p.Len > f.Size() {
		return nil
	}
	segs, ok := f.Segments(p.SrcOff, int(p.Len))
	if !ok {
		return nil
	}
	return spliceResult(segs, int(p.Len))
}

// prefetch reads ahead the stored files under [off, off+n) of the view.
func (r *prefixReader) prefetch(off, n int64) {
	for _, p := range r.v.Pieces(off, n) {
		if p.Zero || p.Prefix {
			continue
		}
		r.mu.Lock()
		src, _, err := r.src.OpenSource(p.Block)
		r.mu.Unlock()
		if f, ok := src.(*store.File); err == nil && ok {
			f.Prefetch(p.SrcOff, p.Len)
		}
	}
}

func (r *prefixReader) Release(ctx context.Context) syscall.Errno {
	r.prefetching.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.src.blocks.close()
	r.src.orig.Close()
	return 0
}

// llamaView is the view of a llama.cpp state file cut to its first n
// tokens (llamastate.Trim): the file llama.cpp would have saved for them,
// served as a snapshot's view is, from the original's bytes.
func llamaView(f *store.File, path, viewPath string, n int64) (*mlx.PrefixView, error) {
	st, err := llamastate.Parse(f, f.Size(), path)
	if err != nil {
		return nil, &refusedView{path: viewPath, err: err}
	}
	lv, err := llamastate.Trim(st, f, n)
	if err != nil {
		return nil, &refusedView{path: viewPath, err: err}
	}
	v := &mlx.PrefixView{Prefix: lv.Prefix, DataStart: int64(len(lv.Prefix)), Size: lv.Size}
	for _, r := range lv.Runs {
		v.Runs = append(v.Runs, mlx.Run{FileOff: r.Off, Len: r.Len, SrcOff: r.SrcOff})
	}
	return v, nil
}
