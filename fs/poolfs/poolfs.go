// Package poolfs is the FUSE filesystem of a pool mount (kvfs mount
// --pool): the pool's names as a directory tree, every file readable by
// every host that mounts the pool. A file written through the mount is
// spooled locally and published when it is closed or fsynced (pool.Publish:
// its chunks are deduplicated against the whole pool); only then do other
// hosts see it. Renames and removals change names at once.
//
// Pool objects are immutable: an existing file can be replaced (opened
// with O_TRUNC, or renamed over) but not changed in place; an open for
// writing without O_TRUNC is refused with EOPNOTSUPP. Directories are the
// names' prefixes: a directory made with mkdir lives in this mount's memory
// until a file is published under it.
package poolfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/kvfs/kvfs/pool"
)

// Options configure a pool mount.
type Options struct {
	Pool *pool.Pool
	// SpoolDir holds files being written until they are published.
	SpoolDir   string
	Logger     *slog.Logger
	AllowOther bool
	// Timeout is how long the kernel may cache names and attributes, and
	// how long the mount reuses a listing of the names (other hosts'
	// changes show after at most this long). 0: 1 s.
	Timeout time.Duration
	// KernelOptions are extra mount options (ro, noexec, ...).
	KernelOptions []string
}

// fsys is one mount's state.
type fsys struct {
	opts Options
	uid  uint32
	gid  uint32

	// started is every file's and directory's time: the pool keeps no
	// times (yet).
	started time.Time

	mu      sync.Mutex
	listed  time.Time
	names   []string        // sorted, as of listed
	madeDir map[string]bool // directories made with mkdir, not yet holding a name
}

// Mount mounts the pool at mnt and serves it until unmounted.
func Mount(mnt string, opts Options) (*fuse.Server, error) {
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	if err := os.MkdirAll(opts.SpoolDir, 0o700); err != nil {
		return nil, fmt.Errorf("pool mount: spool %s: %w", opts.SpoolDir, err)
	}
	f := &fsys{opts: opts, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), started: time.Now(), madeDir: map[string]bool{}}
	root := &dirNode{fsys: f}
	t := opts.Timeout
	fo := &gofs.Options{
		EntryTimeout:    &t,
		AttrTimeout:     &t,
		NegativeTimeout: &t,
		Logger:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		MountOptions: fuse.MountOptions{
			FsName:            "kvfs-pool",
			Name:              "kvfs",
			AllowOther:        opts.AllowOther,
			MaxWrite:          1 << 20,
			MaxReadAhead:      1 << 20,
			DirectMountStrict: os.Geteuid() == 0,
			Options:           append([]string{"default_permissions"}, opts.KernelOptions...),
		},
	}
	// O_TRUNC comes with the open (the kernel sends no separate truncate
	// first): an open with O_TRUNC replaces a file, one without it may
	// not change it in place.
	fo.MountOptions.ExtraCapabilities |= fuse.CAP_ATOMIC_O_TRUNC
	srv, err := gofs.Mount(mnt, root, fo)
	if err != nil {
		return nil, fmt.Errorf("pool mount on %s: %w", mnt, err)
	}
	return srv, nil
}

// list returns the pool's names, listed at most Timeout ago.
func (f *fsys) list(ctx context.Context) ([]string, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.listed) < f.opts.Timeout {
		return f.names, 0
	}
	names, err := f.opts.Pool.List(ctx, "")
	if err != nil {
		f.opts.Logger.Warn("pool mount: list names", "err", err)
		return nil, syscall.EIO
	}
	f.names, f.listed = names, time.Now()
	return names, 0
}

// forget drops the listing: the next lookup lists again (after a change
// through this mount).
func (f *fsys) forget() {
	f.mu.Lock()
	f.listed = time.Time{}
	f.mu.Unlock()
}

// kind says what a path is in the listing: a file, a directory (a prefix
// of names, or made with mkdir), or nothing.
func (f *fsys) kind(ctx context.Context, p string) (file, dir bool, errno syscall.Errno) {
	names, errno := f.list(ctx)
	if errno != 0 {
		return false, false, errno
	}
	i, found := slices.BinarySearch(names, p)
	if found {
		return true, false, 0
	}
	if i < len(names) && strings.HasPrefix(names[i], p+"/") {
		return false, true, 0
	}
	// A name sorting after p+"/" but before ... : search the prefix.
	j, _ := slices.BinarySearch(names, p+"/")
	if j < len(names) && strings.HasPrefix(names[j], p+"/") {
		return false, true, 0
	}
	f.mu.Lock()
	dir = f.madeDir[p]
	f.mu.Unlock()
	return false, dir, 0
}

// errno maps a pool error to the errno a caller gets.
func errno(log *slog.Logger, op string, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, syscall.EIO):
		log.Error("pool mount: "+op, "err", err)
		return syscall.EIO
	}
	log.Error("pool mount: "+op, "err", err)
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// dirNode is a directory: the root ("") or a prefix of names.
type dirNode struct {
	gofs.Inode
	fsys *fsys
	path string
}

var (
	_ gofs.NodeLookuper  = (*dirNode)(nil)
	_ gofs.NodeReaddirer = (*dirNode)(nil)
	_ gofs.NodeCreater   = (*dirNode)(nil)
	_ gofs.NodeMkdirer   = (*dirNode)(nil)
	_ gofs.NodeUnlinker  = (*dirNode)(nil)
	_ gofs.NodeRmdirer   = (*dirNode)(nil)
	_ gofs.NodeRenamer   = (*dirNode)(nil)
	_ gofs.NodeGetattrer = (*dirNode)(nil)
)

func (n *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fsys.dirAttr(&out.Attr)
	return 0
}

func (f *fsys) dirAttr(a *fuse.Attr) {
	a.Mode = syscall.S_IFDIR | 0o755
	a.Nlink = 2
	a.Uid, a.Gid = f.uid, f.gid
	a.SetTimes(&f.started, &f.started, &f.started)
}

func (f *fsys) fileAttr(a *fuse.Attr, size int64) {
	a.Mode = syscall.S_IFREG | 0o644
	a.Nlink = 1
	a.Size = uint64(size)
	a.Blocks = (uint64(size) + 511) / 512
	a.Uid, a.Gid = f.uid, f.gid
	a.SetTimes(&f.started, &f.started, &f.started)
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	p := join(n.path, name)
	file, dir, e := n.fsys.kind(ctx, p)
	if e != 0 {
		return nil, e
	}
	switch {
	case file:
		size, err := n.fsys.opts.Pool.Stat(ctx, p)
		if e := errno(n.fsys.opts.Logger, "stat "+p, err); e != 0 {
			return nil, e
		}
		n.fsys.fileAttr(&out.Attr, size)
		return n.NewInode(ctx, &fileNode{fsys: n.fsys, path: p}, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
	case dir:
		n.fsys.dirAttr(&out.Attr)
		return n.NewInode(ctx, &dirNode{fsys: n.fsys, path: p}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	return nil, syscall.ENOENT
}

func (n *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	names, e := n.fsys.list(ctx)
	if e != 0 {
		return nil, e
	}
	prefix := ""
	if n.path != "" {
		prefix = n.path + "/"
	}
	seen := map[string]bool{}
	var ents []fuse.DirEntry
	add := func(name string, mode uint32) {
		if !seen[name] {
			seen[name] = true
			ents = append(ents, fuse.DirEntry{Name: name, Mode: mode})
		}
	}
	i, _ := slices.BinarySearch(names, prefix)
	for ; i < len(names) && strings.HasPrefix(names[i], prefix); i++ {
		rest := names[i][len(prefix):]
		if child, _, isDir := strings.Cut(rest, "/"); isDir {
			add(child, syscall.S_IFDIR)
		} else {
			add(rest, syscall.S_IFREG)
		}
	}
	n.fsys.mu.Lock()
	for d := range n.fsys.madeDir {
		if rest, ok := strings.CutPrefix(d, prefix); ok && !strings.Contains(rest, "/") && rest != "" {
			add(rest, syscall.S_IFDIR)
		}
	}
	n.fsys.mu.Unlock()
	return gofs.NewListDirStream(ents), 0
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	p := join(n.path, name)
	if file, dir, e := n.fsys.kind(ctx, p); e != 0 {
		return nil, e
	} else if file || dir {
		return nil, syscall.EEXIST
	}
	n.fsys.mu.Lock()
	n.fsys.madeDir[p] = true
	n.fsys.mu.Unlock()
	n.fsys.dirAttr(&out.Attr)
	return n.NewInode(ctx, &dirNode{fsys: n.fsys, path: p}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	p := join(n.path, name)
	n.fsys.forget()
	names, e := n.fsys.list(ctx)
	if e != 0 {
		return e
	}
	i, _ := slices.BinarySearch(names, p+"/")
	if i < len(names) && strings.HasPrefix(names[i], p+"/") {
		return syscall.ENOTEMPTY
	}
	n.fsys.mu.Lock()
	defer n.fsys.mu.Unlock()
	for d := range n.fsys.madeDir {
		if strings.HasPrefix(d, p+"/") {
			return syscall.ENOTEMPTY
		}
	}
	if !n.fsys.madeDir[p] {
		return syscall.ENOENT
	}
	delete(n.fsys.madeDir, p)
	return 0
}

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	p := join(n.path, name)
	err := n.fsys.opts.Pool.Remove(ctx, p)
	n.fsys.forget()
	return errno(n.fsys.opts.Logger, "remove "+p, err)
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	to, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	if flags != 0 {
		return syscall.EINVAL
	}
	from, dst := join(n.path, name), join(to.path, newName)
	if file, _, e := n.fsys.kind(ctx, from); e != 0 {
		return e
	} else if !file {
		// Directories are prefixes of many names: renaming one is not
		// one transaction.
		return syscall.EOPNOTSUPP
	}
	err := n.fsys.opts.Pool.Rename(ctx, from, dst)
	n.fsys.forget()
	return errno(n.fsys.opts.Logger, "rename "+from, err)
}

func (n *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	p := join(n.path, name)
	if file, dir, e := n.fsys.kind(ctx, p); e != 0 {
		return nil, nil, 0, e
	} else if dir {
		return nil, nil, 0, syscall.EISDIR
	} else if file && flags&syscall.O_EXCL != 0 {
		return nil, nil, 0, syscall.EEXIST
	}
	w, e := n.fsys.newWriter(p)
	if e != 0 {
		return nil, nil, 0, e
	}
	node := &fileNode{fsys: n.fsys, path: p}
	n.fsys.fileAttr(&out.Attr, 0)
	return n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG}), w, fuse.FOPEN_DIRECT_IO, 0
}

// fileNode is a pool file.
type fileNode struct {
	gofs.Inode
	fsys *fsys
	path string
}

var (
	_ gofs.NodeOpener    = (*fileNode)(nil)
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeSetattrer = (*fileNode)(nil)
)

func (n *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	switch h := fh.(type) {
	case *writer:
		n.fsys.fileAttr(&out.Attr, h.size())
		return 0
	case *reader:
		// The size of the version this handle reads, not of what the name
		// points to now (another host may have replaced it).
		n.fsys.fileAttr(&out.Attr, h.f.Size())
		return 0
	}
	size, err := n.fsys.opts.Pool.Stat(ctx, n.path)
	if e := errno(n.fsys.opts.Logger, "stat "+n.path, err); e != 0 {
		return e
	}
	n.fsys.fileAttr(&out.Attr, size)
	return 0
}

// Setattr allows what cp and the engine's writer do to a file being
// written (truncate it; chmod and times are accepted and not kept).
func (n *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		w, isW := fh.(*writer)
		if !isW && sz == 0 {
			// truncate(path, 0): the file becomes empty, published as such.
			err := n.fsys.opts.Pool.Publish(ctx, n.path, bytes.NewReader(nil), 0)
			n.fsys.forget()
			if e := errno(n.fsys.opts.Logger, "truncate "+n.path, err); e != 0 {
				return e
			}
			return n.Getattr(ctx, fh, out)
		}
		if !isW {
			return syscall.EOPNOTSUPP
		}
		w.mu.Lock()
		err := w.spool.Truncate(int64(sz))
		w.dirty = true
		w.mu.Unlock()
		if err != nil {
			return errno(n.fsys.opts.Logger, "truncate "+n.path, err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		if flags&syscall.O_TRUNC == 0 {
			// Writing into an empty file changes nothing in place.
			size, err := n.fsys.opts.Pool.Stat(ctx, n.path)
			if e := errno(n.fsys.opts.Logger, "stat "+n.path, err); e != 0 {
				return nil, 0, e
			}
			if size != 0 {
				return nil, 0, syscall.EOPNOTSUPP
			}
		}
		w, e := n.fsys.newWriter(n.path)
		if e != 0 {
			return nil, 0, e
		}
		w.dirty = true // truncated: the file becomes empty at close
		return w, fuse.FOPEN_DIRECT_IO, 0
	}
	f, err := n.fsys.opts.Pool.Open(ctx, n.path)
	if e := errno(n.fsys.opts.Logger, "open "+n.path, err); e != 0 {
		return nil, 0, e
	}
	return &reader{f: f}, 0, 0
}

// reader reads a published file.
type reader struct{ f *pool.File }

var _ gofs.FileReader = (*reader)(nil)

func (r *reader) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := r.f.ReadAtContext(ctx, dest, off)
	if err != nil && n < len(dest) && off+int64(n) < r.f.Size() {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// writer is a file being written: a local spool, published at flush
// (close) and fsync when it changed.
type writer struct {
	fsys  *fsys
	path  string
	spool *os.File

	mu    sync.Mutex
	dirty bool
}

var (
	_ gofs.FileWriter   = (*writer)(nil)
	_ gofs.FileReader   = (*writer)(nil)
	_ gofs.FileFlusher  = (*writer)(nil)
	_ gofs.FileFsyncer  = (*writer)(nil)
	_ gofs.FileReleaser = (*writer)(nil)
)

func (f *fsys) newWriter(p string) (*writer, syscall.Errno) {
	spool, err := os.CreateTemp(f.opts.SpoolDir, "spool-*")
	if err != nil {
		return nil, errno(f.opts.Logger, "spool "+p, err)
	}
	os.Remove(spool.Name()) // lives while open; a crash leaves nothing
	return &writer{fsys: f, path: p, spool: spool}, 0
}

func (w *writer) size() int64 {
	fi, err := w.spool.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (w *writer) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.spool.WriteAt(data, off)
	w.dirty = true
	if err != nil {
		return uint32(n), errno(w.fsys.opts.Logger, "write "+w.path, err)
	}
	return uint32(n), 0
}

func (w *writer) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := w.spool.ReadAt(dest, off)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return nil, errno(w.fsys.opts.Logger, "read "+w.path, err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// publish publishes the spool if it changed since it was last published.
func (w *writer) publish(ctx context.Context) syscall.Errno {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty {
		return 0
	}
	fi, err := w.spool.Stat()
	if err != nil {
		return errno(w.fsys.opts.Logger, "publish "+w.path, err)
	}
	if err := w.fsys.opts.Pool.Publish(ctx, w.path, w.spool, fi.Size()); err != nil {
		return errno(w.fsys.opts.Logger, "publish "+w.path, err)
	}
	w.dirty = false
	w.fsys.forget()
	w.fsys.mu.Lock()
	for d := path.Dir(w.path); d != "." && d != ""; d = path.Dir(d) {
		delete(w.fsys.madeDir, d)
	}
	w.fsys.mu.Unlock()
	return 0
}

func (w *writer) Flush(ctx context.Context) syscall.Errno {
	return w.publish(context.WithoutCancel(ctx))
}

func (w *writer) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return w.publish(context.WithoutCancel(ctx))
}

func (w *writer) Release(ctx context.Context) syscall.Errno {
	e := w.publish(context.WithoutCancel(ctx))
	if e != 0 {
		w.keep()
	}
	w.spool.Close()
	return e
}

// keep saves the bytes of a file whose last publish failed (S3 or etcd
// unreachable at its close) into the spool directory under a name that
// says so, and logs how to publish them: the writer's close reported the
// error, but the bytes are not thrown away with the spool.
func (w *writer) keep() {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.fsys.opts.Logger
	fi, err := w.spool.Stat()
	if err != nil {
		log.Error("pool mount: the bytes of a file not published are lost", "path", w.path, "err", err)
		return
	}
	base := strings.Map(func(r rune) rune {
		if r == '/' || r < ' ' || r == utf8.RuneError {
			return '_'
		}
		return r
	}, path.Base(w.path))
	f, err := os.CreateTemp(w.fsys.opts.SpoolDir, "unpublished-"+time.Now().UTC().Format("20060102T150405")+"-*-"+base)
	if err == nil {
		_, err = io.Copy(f, io.NewSectionReader(w.spool, 0, fi.Size()))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
		}
	}
	if err != nil {
		log.Error("pool mount: the bytes of a file not published are lost", "path", w.path, "err", err)
		return
	}
	log.Error("pool mount: a file could not be published at its close; its bytes are kept",
		"path", w.path, "kept", f.Name(), "publish them with", "kvfs pool put "+f.Name()+" "+w.path)
}
