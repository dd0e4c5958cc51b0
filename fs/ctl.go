package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// The /.kvfs tree is read-only and virtual, hidden from listings of the
// root:
//
//	/.kvfs/stats         JSON totals of the store, as of the open
//	/.kvfs/whole/<path>  every committed snapshot as a self-contained
//	                     whole-layout file: a blocks-layout manifest
//	                     resolved into its tensors (hashes computed on
//	                     first open, then cached); other files as they are
//	/.kvfs/prefix/<path>@<N>  the snapshot <path> (either layout) cut to
//	                     its first N tokens, as a whole-layout file
//	                     served from the original's bytes (prefixview.go);
//	                     an N its kinds do not allow is ENOENT
const ctlName = ".kvfs"

// Inode numbers of the virtual tree, far above the store's.
const (
	ctlIno       = 1 << 62
	ctlStatsIno  = ctlIno + 1
	ctlWholeIno  = ctlIno + 2
	ctlPrefixIno = ctlIno + 3
	ctlMirror    = ctlIno + 1<<40 // + store inode: mirrors in whole/
)

type ctlDir struct {
	gofs.Inode
	fsys *FS
}

func (fsys *FS) ctlNode(ctx context.Context, parent *gofs.Inode) *gofs.Inode {
	return parent.NewPersistentInode(ctx, &ctlDir{fsys: fsys}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlIno})
}

func (d *ctlDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
}

// ctlAttr describes a node of the virtual tree that mirrors no file
// (/.kvfs, /.kvfs/whole, /.kvfs/stats): owned by the root directory's
// owner, with mode, read-only for everyone (the kernel checks them:
// default_permissions).
func (fsys *FS) ctlAttr(a *fuse.Attr, mode uint32) syscall.Errno {
	fi, err := fsys.s.StatIno(manifest.RootIno)
	if err != nil {
		return fsys.errno("getattr "+ctlName, err)
	}
	fillAttr(fi, a)
	a.Mode, a.Size, a.Blocks = mode, 0, 0
	if mode&syscall.S_IFDIR == 0 {
		a.Nlink = 1
	}
	return 0
}

func (d *ctlDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	switch name {
	case "match": // match.go
		if e := d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555); e != 0 {
			return nil, e
		}
		return d.NewInode(ctx, &matchDir{fsys: d.fsys}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlMatchIno}), 0
	case "candidates": // candidates.go
		if e := d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555); e != 0 {
			return nil, e
		}
		return d.NewInode(ctx, &candidatesDir{fsys: d.fsys}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlCandidatesIno}), 0
	case "stats":
		f := &statsFile{fsys: d.fsys}
		// Its size as of now, as Getattr gives it: the kernel answers the
		// first stat from the lookup's attributes (they said 0 before).
		var a fuse.AttrOut
		if e := f.Getattr(ctx, nil, &a); e != 0 {
			return nil, e
		}
		out.Attr = a.Attr
		return d.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ctlStatsIno}), 0
	case "whole":
		if e := d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555); e != 0 {
			return nil, e
		}
		return d.NewInode(ctx, &mirrorDir{fsys: d.fsys, ino: 1}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlWholeIno}), 0
	case "prefix":
		if e := d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555); e != 0 {
			return nil, e
		}
		return d.NewInode(ctx, &mirrorDir{fsys: d.fsys, ino: 1, prefix: true}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlPrefixIno}), 0
	}
	return nil, syscall.ENOENT
}

func (d *ctlDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(append(dotEntries(&d.Inode, 5),
		fuse.DirEntry{Name: "candidates", Mode: syscall.S_IFDIR, Ino: ctlCandidatesIno},
		fuse.DirEntry{Name: "match", Mode: syscall.S_IFDIR, Ino: ctlMatchIno},
		fuse.DirEntry{Name: "stats", Mode: syscall.S_IFREG, Ino: ctlStatsIno},
		fuse.DirEntry{Name: "whole", Mode: syscall.S_IFDIR, Ino: ctlWholeIno},
		fuse.DirEntry{Name: "prefix", Mode: syscall.S_IFDIR, Ino: ctlPrefixIno},
	)), 0
}

// statsFile is /.kvfs/stats: its content is made at each open.
type statsFile struct {
	gofs.Inode
	fsys *FS
}

func (f *statsFile) content() ([]byte, error) {
	st, err := f.fsys.s.Stats()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	return append(b, '\n'), err
}

func (f *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	b, err := f.content()
	if err != nil {
		return f.fsys.errno("stats", err)
	}
	if e := f.fsys.ctlAttr(&out.Attr, syscall.S_IFREG|0o444); e != 0 {
		return e
	}
	out.Size = uint64(len(b))
	return 0
}

func (f *statsFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	b, err := f.content()
	if err != nil {
		return nil, 0, f.fsys.errno("stats", err)
	}
	return bytesHandle(b), fuse.FOPEN_DIRECT_IO, 0
}

// bytesHandle serves a byte slice made at open.
type bytesHandle []byte

func (b bytesHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(b[off:min(int64(len(b)), off+int64(len(dest)))]), 0
}

// mirrorDir is a directory of the store seen under /.kvfs/whole.
type mirrorDir struct {
	gofs.Inode
	fsys *FS
	ino  uint64 // the store directory
	// prefix: a directory of /.kvfs/prefix, whose files are views
	// name@N (lookupPrefix) and which lists its directories only.
	prefix bool
}

// placeOf is where a node of the view tree was last looked up, as go-fuse's
// tree holds it: its directory (nil for the root of the view tree) and its
// name there. The view tree is not told of renames and commits, so each
// use checks that the place still leads to the node's store inode (see
// mirrorDir.valid). go-fuse keeps one node per inode number and records
// each lookup that finds it as its newest parent, so a renamed file or
// directory is checked at the place it was last found.
func placeOf(n *gofs.Inode) (*mirrorDir, string) {
	name, p := n.Parent()
	if p == nil {
		return nil, ""
	}
	up, _ := p.Operations().(*mirrorDir)
	return up, name
}

// valid reports whether d's place (its name in the view directory that
// last found it) still leads to the store directory it showed: a
// goneError otherwise. Only d's own place is checked, in constant time: a
// path walk through the view revalidates every name on it (the entries'
// timeout is a nanosecond), and a view directory held open keeps working
// when a directory above it is renamed, as on a local disk. Checking up
// to the view's root made each lookup cost the depth, and a walk down a
// deep tree the depth cubed.
func (d *mirrorDir) valid() error {
	up, name := placeOf(&d.Inode)
	if up == nil {
		return nil
	}
	fi, err := d.fsys.s.LookupAttr(up.ino, name) // no path: constant time
	if err == nil && fi.Ino != d.ino {
		err = fmt.Errorf("%q now names inode %d, not %d: %w", name, fi.Ino, d.ino, iofs.ErrNotExist)
	}
	if err != nil {
		return &goneError{err}
	}
	return nil
}

// entryTimeout is the kernel's entry and attribute timeout in the view
// tree: as short as go-fuse allows (it takes 0 for "unset"), since the
// tree is not told of renames, commits, chmods and chowns (a view node has
// an inode number of its own, so a change of the original never reaches
// it); nodes check their place at each use anyway. A view's attributes
// are the original's owner and mode, which the kernel checks
// (default_permissions): kept for the mount's attribute timeout, a chmod
// 0700 of the original would not stop a user who holds the view's
// directory open (a cwd, an O_PATH descriptor).
const entryTimeout = time.Nanosecond

// denied maps the error of a permission check of the view tree: EACCES
// when the caller may not, as the kernel answers for the original.
func (fsys *FS) denied(op string, err error) syscall.Errno {
	if errors.Is(err, iofs.ErrPermission) {
		return syscall.EACCES
	}
	return fsys.stale(op, err)
}

func (d *mirrorDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if err := d.valid(); err != nil {
		return d.fsys.stale("getattr", err)
	}
	fi, err := d.fsys.s.StatIno(d.ino)
	if err != nil {
		return d.fsys.stale("getattr", err)
	}
	if up, _ := placeOf(&d.Inode); up == nil {
		// /.kvfs/whole itself, the store's root: read-only.
		return d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
	}
	fillAttr(fi, &out.Attr) // the original's owner and mode
	out.SetTimeout(entryTimeout)
	return 0
}

// The kernel checks a view's attributes as it last got them; the daemon
// checks the original's, as they are now, with the caller's credentials:
// searching a directory to look a name up, reading it to list it, reading
// a file to open it. A user who holds a view directory open (a cwd, an
// O_PATH descriptor) after its original became 0700 gets EACCES, as in the
// original.

// Opendir implements gofs.NodeOpendirer.
func (d *mirrorDir) Opendir(ctx context.Context) syscall.Errno {
	if err := d.valid(); err != nil {
		return d.fsys.stale("opendir", err)
	}
	if err := d.fsys.s.MayList(d.ino, cred(ctx)); err != nil {
		return d.fsys.denied("opendir", err)
	}
	return 0
}

func (d *mirrorDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	// Set first: a miss is not cached either (uncachedMiss), since the
	// views are not told of new names.
	out.SetEntryTimeout(entryTimeout)
	out.SetAttrTimeout(entryTimeout)
	if err := d.valid(); err != nil {
		return nil, d.fsys.stale("lookup", err)
	}
	if err := d.fsys.s.MaySearch(d.ino, cred(ctx)); err != nil {
		return nil, d.fsys.denied("lookup", err)
	}
	if d.prefix {
		return d.lookupPrefix(ctx, name, out)
	}
	// Without the path (built from the root up, the depth in index
	// reads): a walk down the view pays it at every name.
	fi, err := d.fsys.s.LookupAttr(d.ino, name)
	if err == nil && !fi.IsDir() {
		// Leased (lease); its path names it in errors and logs.
		fi, err = d.fsys.lookupLeased(ctx, d.ino, name)
	}
	if err != nil {
		return nil, d.fsys.lookupErrno(err)
	}
	if fi.IsDir() {
		fillAttr(fi, &out.Attr) // the original's owner and mode
		md := &mirrorDir{fsys: d.fsys, ino: fi.Ino}
		return d.NewInode(ctx, md, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlMirror + fi.Ino}), 0
	}
	// A view node shows one committed version: immutable, so its
	// attributes and pages stay valid while the kernel keeps them.
	w := &wholeFile{fsys: d.fsys, ino: fi.Ino, found: fi}
	v, fi, err := w.resolve(ctx, d, fi)
	if err != nil {
		return nil, w.viewErrno(err)
	}
	w.attr(v, fi, &out.Attr)
	d.fsys.walks.looked(ctx, ctlMirror+fi.Ino)
	return d.NewInode(ctx, w, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ctlMirror + fi.Ino}), 0
}

func (d *mirrorDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	if err := d.valid(); err != nil {
		return nil, d.fsys.stale("readdir", err)
	}
	if err := d.fsys.s.MayList(d.ino, cred(ctx)); err != nil {
		return nil, d.fsys.denied("readdir", err)
	}
	ents, err := d.fsys.s.ReadDir(d.ino)
	if err != nil {
		return nil, d.fsys.errno("readdir", err)
	}
	list := dotEntries(&d.Inode, len(ents))
	for _, e := range ents {
		switch {
		case !d.prefix:
			list = append(list, fuse.DirEntry{Name: e.Name, Ino: ctlMirror + e.Ino, Mode: unixMode(e.Mode)})
		case e.Mode.IsDir():
			list = append(list, fuse.DirEntry{Name: e.Name, Ino: ctlPrefixDirs + e.Ino, Mode: unixMode(e.Mode)})
		}
	}
	return gofs.NewListDirStream(list), 0
}

// wholeFile is a committed file seen under /.kvfs/whole: a blocks-layout
// snapshot resolved, anything else as it is.
type wholeFile struct {
	gofs.Inode
	fsys *FS
	ino  uint64 // the store file
	// found is the version as its lookup found it (see prefixFile).
	found *store.FileInfo
}

// goneError is the version a view node shows, gone (replaced or removed).
type goneError struct{ err error }

func (e *goneError) Error() string { return e.err.Error() }
func (e *goneError) Unwrap() error { return e.err }

// brokenViewError is a snapshot that exists but cannot be resolved: a
// block it lists is missing, or not the caller's to read.
type brokenViewError struct {
	path string // the snapshot
	err  error  // names the block
}

func (e *brokenViewError) Error() string { return fmt.Sprintf("resolve %s: %v", e.path, e.err) }
func (e *brokenViewError) Unwrap() error { return e.err }

// viewErrno maps an error of view: ESTALE when the node's version is
// gone, so that the kernel looks the name up again; EIO, logged, when the
// snapshot is there but its blocks are not (never ENOENT: the file
// exists).
func (w *wholeFile) viewErrno(err error) syscall.Errno {
	var gone *goneError
	if errors.As(err, &gone) {
		return w.fsys.stale("resolve snapshot", err)
	}
	var broken *brokenViewError
	if errors.As(err, &broken) {
		return w.fsys.brokenView(broken)
	}
	return w.fsys.errno("resolve snapshot", err)
}

// missingBlock reports an error of a blockSource that means the block is
// missing for the caller: not in the store, or not the caller's to read.
func missingBlock(err error) bool {
	return errors.Is(err, iofs.ErrNotExist) || errors.Is(err, iofs.ErrPermission)
}

// brokenView logs a snapshot whose view cannot be served, once per request,
// and answers EIO.
func (fsys *FS) brokenView(e *brokenViewError) syscall.Errno {
	fsys.log.Error("whole view of a snapshot: a block is missing", "file", e.path, "err", e.err)
	fsys.Metrics.countError(syscall.EIO)
	return syscall.EIO
}

// view returns the resolved snapshot, or nil for a file shown as is.
func (w *wholeFile) view(ctx context.Context) (*mlx.WholeView, *store.FileInfo, error) {
	// The node shows the version its name led to when it was looked up;
	// once the name leads elsewhere (a commit, a rename), the kernel must
	// look it up again.
	up, name := placeOf(&w.Inode)
	if up == nil {
		return nil, nil, &goneError{fmt.Errorf("view of inode %d: %w", w.ino, iofs.ErrNotExist)}
	}
	if err := up.valid(); err != nil {
		return nil, nil, err
	}
	fi, err := w.fsys.s.Lookup(up.ino, name)
	if err == nil && fi.Ino != w.ino {
		err = fmt.Errorf("%q now names inode %d, not %d: %w", name, fi.Ino, w.ino, iofs.ErrNotExist)
	}
	if err != nil {
		return nil, nil, &goneError{err}
	}
	return w.resolve(ctx, up, fi)
}

// walked is view for a getattr or an open; see prefixFile.walked.
func (w *wholeFile) walked(ctx context.Context, open bool) (*mlx.WholeView, *store.FileInfo, error) {
	v, fi, err := w.view(ctx)
	var gone *goneError
	if w.fsys.walks.recent(ctx, w.StableAttr().Ino, open) && errors.As(err, &gone) {
		if up, _ := placeOf(&w.Inode); up != nil {
			v, fi, err = w.resolve(ctx, up, w.found)
		}
	}
	return v, fi, err
}

// resolve returns the resolved snapshot of version fi in directory up (where
// its blocks/ is), or nil for a file shown as is.
func (w *wholeFile) resolve(ctx context.Context, up *mirrorDir, fi *store.FileInfo) (*mlx.WholeView, *store.FileInfo, error) {
	if fi.Kind != "mlxkv" {
		return nil, fi, nil
	}
	cr := cred(ctx)
	key := brokenKey(fi.ManifestID, up.ino, cr)
	if err := w.fsys.views.brokenErr(key, time.Now()); err != nil {
		w.fsys.Metrics.ViewHits.Inc()
		return nil, nil, err
	}
	v, hit, err := w.fsys.views.do(ctx, fi.ManifestID, func() (*mlx.WholeView, error) {
		w.fsys.Metrics.ViewParses.Inc()
		f, err := w.fsys.s.OpenIno(w.ino)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		snap, err := mlx.Parse(f, f.Size(), fi.Path)
		if err != nil || !snap.Blocks() {
			return nil, nil // shown as it is
		}
		// The blocks are read as the caller: one who may not read them
		// gets EIO, remembered for that caller only (brokenKey).
		src := &blockSource{fsys: w.fsys, dir: up.ino, cred: cr}
		defer src.close()
		// Finished even if the caller is interrupted: the view is
		// cached for the next open.
		v, err := mlx.NewWholeView(context.WithoutCancel(ctx), snap, src)
		if missingBlock(err) {
			return nil, &brokenViewError{path: fi.Path, err: err}
		}
		return v, err
	})
	if hit {
		w.fsys.Metrics.ViewHits.Inc()
	} else {
		w.fsys.Metrics.ViewMisses.Inc()
	}
	var broken *brokenViewError
	if errors.As(err, &broken) && !hit {
		w.fsys.views.noteBroken(key, err, time.Now())
	}
	if err != nil {
		return nil, nil, err
	}
	return v, fi, nil
}

func (w *wholeFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	// An open view (fstat) is the version it holds, even once the
	// original's name leads elsewhere, as an open file on a disk (and as
	// prefix views, where a red team saw ESTALE). The kernel asks for
	// attributes during reads too (the timeout is a nanosecond), so a
	// handle's reads depend on this as much as its fstat does.
	switch r := fh.(type) {
	case *wholeReader:
		w.attr(r.v, r.fi, &out.Attr)
		out.SetTimeout(entryTimeout)
		return 0
	case *fixedView:
		w.attr(nil, r.fi, &out.Attr)
		out.SetTimeout(entryTimeout)
		return 0
	}
	v, fi, err := w.walked(ctx, false)
	if err != nil {
		return w.viewErrno(err)
	}
	w.attr(v, fi, &out.Attr)
	out.SetTimeout(entryTimeout)
	return 0
}

// attr describes a view: the original's attributes, owner and mode (the
// kernel checks them: default_permissions) without the write bits, with
// the resolved snapshot's size.
func (w *wholeFile) attr(v *mlx.WholeView, fi *store.FileInfo, a *fuse.Attr) {
	fillAttr(fi, a)
	a.Mode = syscall.S_IFREG | unixMode(fi.Mode)&^(syscall.S_IFMT|0o222)
	if v != nil {
		a.Size = uint64(v.Size)
		a.Blocks = (a.Size + 511) / 512
	}
}

// mayOpenView checks an open of a view file (read-only) of the original
// ino, found as node: the caller may open the original, and may search
// the directory it was found in, as it is now: the kernel may still hold
// the name's entry and the directory's attributes from before a chmod
// 0700 of the original (for up to a jiffy: their timeout, a nanosecond,
// rounds up), and then sends no lookup for the daemon to refuse.
// (Narrower than a disk, where a descriptor reopened through /proc needs
// no search of the directory.)
func (fsys *FS) mayOpenView(ctx context.Context, node *gofs.Inode, ino uint64, flags uint32) syscall.Errno {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return syscall.EROFS
	}
	c := cred(ctx)
	if err := fsys.s.MayOpen(ino, c); err != nil {
		return fsys.denied("open", err)
	}
	if up, _ := placeOf(node); up != nil {
		if err := fsys.s.MaySearch(up.ino, c); err != nil {
			return fsys.denied("open", err)
		}
	}
	return 0
}

func (w *wholeFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if e := w.fsys.mayOpenView(ctx, &w.Inode, w.ino, flags); e != 0 {
		return nil, 0, e
	}
	v, fi, err := w.walked(ctx, true)
	if err != nil {
		return nil, 0, w.viewErrno(err)
	}
	if v == nil {
		f, err := w.fsys.s.OpenIno(w.ino)
		if err != nil {
			return nil, 0, w.fsys.stale("open", err)
		}
		// Keeping the kernel's pages is right on every platform,
		// macFUSE (which keeps them whatever the open answers)
		// included: a view node is one version of its file (its
		// inode number is the version's), and versions never change.
		return &fixedView{reader: fixedReader(w.fsys, f), fi: fi}, fuse.FOPEN_KEEP_CACHE, 0
	}
	up, _ := placeOf(&w.Inode)
	if up == nil {
		return nil, 0, syscall.ESTALE
	}
	// The open view holds the manifest's version, as an open file holds
	// its own: the evictor passes over a held file, and the blocks a
	// manifest lists stay while it does (before, capacity eviction
	// removed the manifest and then its blocks under an open view, whose
	// reads then failed with ESTALE: red team, F5).
	held, err := w.fsys.s.OpenIno(fi.Ino)
	if err != nil {
		return nil, 0, w.fsys.stale("open", err)
	}
	// Kept pages, as above: one version, resolved from content-addressed
	// blocks, which never change either.
	return &wholeReader{v: v, fi: fi, path: fi.Path, held: held, src: &blockSource{fsys: w.fsys, dir: up.ino, cred: cred(ctx)}}, fuse.FOPEN_KEEP_CACHE, 0
}

// fixedView is an open view of a file shown as it is (a whole-layout
// snapshot, any file not a blocks-layout one): it reads the version it
// opened, which it holds, and fstat answers with that version's
// attributes (Getattr), whatever its name leads to now. (Before, the
// handle was a bare reader, and Getattr looked the name up again: once
// the original was renamed away, renamed over or unlinked, the kernel's
// getattr during a read failed with ESTALE.)
type fixedView struct {
	*reader
	fi *store.FileInfo // the version reader holds (fi.Ino)
}

// wholeReader reads a resolved snapshot: prefix bytes, block ranges, zeros.
type wholeReader struct {
	v    *mlx.WholeView
	path string          // the snapshot, for errors
	held *store.File     // the manifest's version, held while open
	fi   *store.FileInfo // and its attributes, for fstat
	mu   sync.Mutex      // guards src's open blocks
	src  *blockSource
}

func (r *wholeReader) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := 0
	for _, p := range r.v.Pieces(off, int64(len(dest))) {
		b := dest[n : n+int(p.Len)]
		switch {
		case p.Zero:
			clear(b)
		case p.Block == "":
			copy(b, r.v.Prefix[p.FileOff:])
		default:
			r.mu.Lock()
			f, err := r.src.file(p.Block)
			r.mu.Unlock()
			if err == nil {
				_, err = f.ReadAt(b, p.BlockOff)
			}
			if missingBlock(err) {
				return nil, r.src.fsys.brokenView(&brokenViewError{path: r.path, err: fmt.Errorf("block %s: %w", p.Block, err)})
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, r.src.fsys.errno("read block "+p.Block, err)
			}
		}
		n += int(p.Len)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (r *wholeReader) Release(ctx context.Context) syscall.Errno {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.src.close()
	r.held.Close()
	return 0
}

// blockSource opens the blocks of a manifest in directory dir through the
// store: dir/blocks/<hash>, found as the engine would find it, and as the
// engine running as cred could open it (a blob adopted by hash, or a
// readable file, in a directory cred may search).
type blockSource struct {
	fsys *FS
	dir  uint64
	cred *store.Cred // the reader; nil: the daemon
	open map[string]*store.File
}

func (b *blockSource) file(hash string) (*store.File, error) {
	if f, ok := b.open[hash]; ok {
		return f, nil
	}
	blocks, err := b.fsys.s.Lookup(b.dir, "blocks")
	if err != nil {
		return nil, err
	}
	fi, err := b.fsys.s.Lookup(blocks.Ino, hash)
	if errors.Is(err, iofs.ErrNotExist) {
		fi, err = b.fsys.s.AdoptBlob(blocks.Ino, hash, b.cred)
	}
	if err == nil {
		err = b.fsys.s.MayRead(fi.Ino, b.cred)
	}
	if err != nil {
		return nil, err
	}
	f, err := b.fsys.s.OpenIno(fi.Ino)
	if err != nil {
		return nil, err
	}
	if b.open == nil {
		b.open = map[string]*store.File{}
	}
	b.open[hash] = f
	return f, nil
}

// OpenBlock implements mlx.BlockSource.
func (b *blockSource) OpenBlock(hash string) (io.ReadCloser, error) {
	f, err := b.file(hash)
	if err != nil {
		return nil, fmt.Errorf("block %s: %w", hash, err)
	}
	return io.NopCloser(io.NewSectionReader(f, 0, f.Size())), nil
}

func (b *blockSource) close() {
	for _, f := range b.open {
		f.Close()
	}
	b.open = nil
}

// The tree under /.kvfs is read-only: a chmod, chown, truncate or utimes
// of its entries is EROFS, as on a read-only mount (go-fuse would answer
// ENOTSUP for an operation a node lacks).
func (d *ctlDir) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (f *statsFile) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (d *mirrorDir) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (w *wholeFile) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}
