// Package poolfs is the FUSE filesystem of a pool mount (kvfs mount
// --pool): the pool's names as a directory tree, every file readable by
// every host that mounts the pool. A file written through the mount is
// spooled locally and published when it is closed or fsynced (pool.Publish:
// its chunks are deduplicated against the whole pool); only then do other
// hosts see it. Here it is a file from its creation: other processes stat
// and read what has been written so far, and it can be renamed (its first
// publish is under the name it has then) or removed (it is never
// published). Renames and removals change names at once; a publish and a
// rename of the same file through one mount are ordered, so a publish
// never lands under the name the file had before.
//
// Pool objects are immutable: an existing file can be replaced (opened
// with O_TRUNC, or renamed over) but not changed in place; an open for
// writing without O_TRUNC is refused with EOPNOTSUPP. Where the kernel
// cannot send O_TRUNC with the open (macOS; --simulate-darwin on Linux),
// an open(O_TRUNC) arrives as an open for writing and then a truncation to
// 0: the open is let through, its writer replaces the file once that
// truncation comes and refuses writes before it, so other hosts never see
// the file empty meanwhile. Directories are the
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
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// DebugFUSE logs every FUSE request and reply (at debug level).
	DebugFUSE bool
	// SimulateDarwin mounts as the darwin build does where it differs:
	// without atomic O_TRUNC, which macFUSE does not offer.
	SimulateDarwin bool
}

// fsys is one mount's state.
type fsys struct {
	opts Options
	lock *os.File // held for the mount's life: the spool directory is this daemon's
	uid  uint32
	gid  uint32
	// atomicTrunc: the kernel sends O_TRUNC with the open (Linux). Without
	// it (macOS) an open(O_TRUNC) comes as an open for writing without
	// O_TRUNC and then a truncation to 0 through the new handle.
	atomicTrunc bool

	// started is every file's and directory's time: the pool keeps no
	// times (yet).
	started time.Time

	mu       sync.Mutex
	listed   time.Time
	names    []string        // sorted, as of listed
	inFlight *call[[]string] // the listing in flight, if any
	madeDir  map[string]bool // directories made with mkdir, not yet holding a name
	// versions are the versions names were last found at, or published,
	// renamed or removed through this mount: what lookups serve while
	// etcd does not answer (pool.ErrEtcdDown), so that cached files stay
	// readable by name through an outage, as they were last seen.
	versions map[string]version
	// dirOwners are the owners directories were last found with (nil:
	// none recorded), for dirOwner while etcd does not answer.
	dirOwners map[string]*pool.Owner
}

// version is one version of a file: its manifest and size, and the owner
// and mode its name had when it was found (nil: none recorded).
type version struct {
	manifest string
	size     int64
	owner    *pool.Owner
}

// maxVersions bounds fsys.versions; past it the map starts over.
const maxVersions = 1 << 16

// saw records that path is at v now (v.manifest "": it is gone).
func (f *fsys) saw(path string, v version) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v.manifest == "" {
		delete(f.versions, path)
		return
	}
	if len(f.versions) >= maxVersions {
		clear(f.versions)
	}
	f.versions[path] = v
}

// moved records a rename from → to: to is at from's version, if known.
func (f *fsys) moved(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.versions[from]
	delete(f.versions, from)
	delete(f.versions, to)
	if ok {
		f.versions[to] = v
	}
}

// etcdWait is how long a lookup that the mount can answer from what it
// last saw (its last listing, a name's last version) waits for etcd
// before it does so. etcd answers in milliseconds: one that has not
// answered by then is slow or hung (issue 26: SIGSTOPped, it made every
// lookup wait --pool-timeout). The call goes on in the background,
// bounded by --pool-timeout: its answer is kept when it comes, and its
// failure opens the pool's circuit, so that later calls fail at once
// (pool.ErrEtcdDown) until etcd answers again.
const etcdWait = 250 * time.Millisecond

// call is a call to the pool that lookups share, or stop waiting for:
// v and err are set when done is closed.
type call[T any] struct {
	done  chan struct{}
	start time.Time
	v     T
	err   error
}

func newCall[T any]() *call[T] { return &call[T]{done: make(chan struct{}), start: time.Now()} }

func (c *call[T]) run(fn func() (T, error)) {
	c.v, c.err = fn()
	close(c.done)
}

// startCall runs fn in the background.
func startCall[T any](fn func() (T, error)) *call[T] {
	c := newCall[T]()
	go c.run(fn)
	return c
}

// wait waits until c ends, or, if the caller has an answer of its own
// (fallback), at most until etcdWait after c started; it reports whether
// c ended.
func (c *call[T]) wait(fallback bool) bool {
	if !fallback {
		<-c.done
		return true
	}
	t := time.NewTimer(etcdWait - time.Since(c.start))
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// resolve is Pool.Resolve, or, while etcd does not answer (or is slower
// than etcdWait), the version this mount last saw for path. The call is
// not made with the request's context: it may outlive the request.
func (f *fsys) resolve(path string) (version, error) {
	f.mu.Lock()
	last, known := f.versions[path]
	late := f.inFlight != nil && time.Since(f.inFlight.start) > etcdWait
	f.mu.Unlock()
	if known && late {
		return last, nil // etcd is late with a listing already: not asked again
	}
	c := startCall(func() (version, error) {
		manifest, size, owner, err := f.opts.Pool.ResolveOwned(context.Background(), path) // it may outlive the request
		if err == nil {
			f.saw(path, version{manifest, size, owner})
		} else if errors.Is(err, fs.ErrNotExist) {
			f.saw(path, version{})
		}
		return version{manifest, size, owner}, err
	})
	switch {
	case !c.wait(known):
		return last, nil
	case c.err == nil, errors.Is(c.err, fs.ErrNotExist):
		return c.v, c.err
	case known:
		return last, nil
	}
	return version{}, c.err
}

// Mount mounts the pool at mnt and serves it until unmounted.
func Mount(mnt string, opts Options) (*fuse.Server, error) {
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	if err := os.MkdirAll(opts.SpoolDir, 0o700); err != nil {
		return nil, fmt.Errorf("pool mount: spool %s: %w", opts.SpoolDir, err)
	}
	// One daemon per spool directory, for its lifetime (the lock goes
	// with the process): a second would take the first's spools below.
	lock, err := os.OpenFile(filepath.Join(opts.SpoolDir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pool mount: spool %s: %w", opts.SpoolDir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("pool mount: spool %s is another kvfs daemon's (its STORE is mounted elsewhere): %w", opts.SpoolDir, err)
	}
	// The last daemon of this spool directory is dead (the lock): its
	// etcd lease goes now, with its claims on names being created and
	// its publish keys, rather than after the lease's TTL (an engine
	// writing again a file whose create the death failed would be told
	// EEXIST meanwhile, with no such name listed).
	if err := opts.Pool.TakeOver(context.Background(), filepath.Join(opts.SpoolDir, "lease")); err != nil {
		opts.Logger.Warn("pool mount: the etcd lease of this directory's last daemon was not revoked; its claims go when it expires", "err", err)
	}
	// Spools of files being written when a daemon died: their writers
	// got an error, and nothing was published from them.
	if old, err := filepath.Glob(filepath.Join(opts.SpoolDir, "spool-*")); err == nil {
		for _, p := range old {
			os.Remove(p)
		}
	}
	f := &fsys{opts: opts, lock: lock, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), started: time.Now(), madeDir: map[string]bool{}, versions: map[string]version{}, dirOwners: map[string]*pool.Owner{},
		atomicTrunc: runtime.GOOS != "darwin" && !opts.SimulateDarwin}
	root := &dirNode{fsys: f}
	t := opts.Timeout
	golog := slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)
	if opts.DebugFUSE {
		golog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)
	}
	fo := &gofs.Options{
		EntryTimeout:    &t,
		AttrTimeout:     &t,
		NegativeTimeout: &t,
		Logger:          golog,
		MountOptions: fuse.MountOptions{
			Debug:             opts.DebugFUSE,
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
	if f.atomicTrunc {
		fo.MountOptions.ExtraCapabilities |= fuse.CAP_ATOMIC_O_TRUNC
	}
	srv, err := gofs.Mount(mnt, root, fo)
	if err != nil {
		return nil, fmt.Errorf("pool mount on %s: %w", mnt, err)
	}
	return srv, nil
}

// list returns the pool's names, listed at most Timeout ago; or, while
// etcd does not answer (or is slower than etcdWait), the last listing.
// One listing is in flight at a time; lookups share it (and it is not
// made with a request's context: it may outlive the request).
func (f *fsys) list() ([]string, syscall.Errno) {
	names, _, e := f.listing()
	return names, e
}

// listing is list, and, when its answer is the last listing because
// etcd is late, the listing still in flight (nil otherwise).
func (f *fsys) listing() ([]string, *call[[]string], syscall.Errno) {
	f.mu.Lock()
	if time.Since(f.listed) < f.opts.Timeout {
		names := f.names
		f.mu.Unlock()
		return names, nil, 0
	}
	c := f.inFlight
	if c == nil {
		c = newCall[[]string]()
		f.inFlight = c
		go c.run(func() ([]string, error) { return f.listNow(c) })
	}
	last := f.names
	f.mu.Unlock()
	switch {
	case !c.wait(last != nil):
		return last, c, 0 // etcd is late: the last listing, meanwhile
	case c.err == nil:
		return c.v, nil, 0
	case last != nil:
		return last, nil, 0 // an outage: the last listing, until etcd answers
	}
	return nil, nil, syscall.EIO
}

// listNow lists the names for c, and keeps the listing unless forget
// dropped c meanwhile (a change through this mount may have come after
// the listing).
func (f *fsys) listNow(c *call[[]string]) ([]string, error) {
	names, err := f.opts.Pool.List(context.Background(), "") // it may outlive the request
	if err != nil && !errors.Is(err, pool.ErrEtcdDown) {
		f.opts.Logger.Warn("pool mount: list names", "err", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight == c {
		f.inFlight = nil
		if err == nil {
			f.names, f.listed = names, time.Now()
		}
	}
	return names, err
}

// forget drops the listing: the next lookup lists again (after a change
// through this mount).
func (f *fsys) forget() {
	f.mu.Lock()
	f.listed = time.Time{}
	f.inFlight = nil
	f.mu.Unlock()
}

// kind says what a path is in the listing: a file, a directory (a prefix
// of names, or made with mkdir), or nothing.
func (f *fsys) kind(p string) (file, dir bool, errno syscall.Errno) {
	names, late, errno := f.listing()
	if errno != 0 {
		return false, false, errno
	}
	file, dir = inListing(names, p)
	if !file && !dir && late != nil {
		// The last listing may be from long ago (this mount's last
		// lookup): its silence about p is no answer, and an ENOENT
		// from it would hide a file another host published since
		// (CI: etcd slower than etcdWait on a loaded machine). Absence
		// waits for etcd, bounded by --pool-timeout; once etcd's
		// circuit is open, the listing fails at once and the last one
		// answers (list).
		<-late.done
		if late.err == nil {
			file, dir = inListing(late.v, p)
		}
	}
	if file || dir {
		return file, dir, 0
	}
	f.mu.Lock()
	dir = f.madeDir[p]
	f.mu.Unlock()
	return false, dir, 0
}

// inListing says whether p is a name of the sorted listing names, or a
// directory (a prefix of one).
func inListing(names []string, p string) (file, dir bool) {
	i, found := slices.BinarySearch(names, p)
	if found {
		return true, false
	}
	if i < len(names) && strings.HasPrefix(names[i], p+"/") {
		return false, true
	}
	// A name sorting after p+"/" but before ... : search the prefix.
	j, _ := slices.BinarySearch(names, p+"/")
	return false, j < len(names) && strings.HasPrefix(names[j], p+"/")
}

// uninterrupted is a request's context without its cancellation. The
// kernel interrupts a request when a signal reaches the thread waiting on
// it, and Go programs get signals all the time (SIGURG, the scheduler's
// preemption): a call to etcd or S3 cut short by one failed the request
// with EIO (a rename in CI, a create in the pool stress test). Every call
// to the pool is bounded by its own timeout (--pool-timeout) instead.
func uninterrupted(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// errno maps a pool error to the errno a caller gets.
func errno(log *slog.Logger, op string, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, pool.ErrNameConflict):
		log.Warn("pool mount: "+op, "err", err)
		return syscall.EEXIST
	case errors.Is(err, pool.ErrEtcdDown), errors.Is(err, pool.ErrS3Down):
		// Not made: the service's circuit is open, which the pool
		// logged once.
		log.Debug("pool mount: "+op, "err", err)
		return syscall.EIO
	case errors.Is(err, syscall.EIO):
		log.Error("pool mount: "+op, "err", err)
		return syscall.EIO
	}
	log.Error("pool mount: "+op, "err", err)
	// Only errnos that say something about the file system reach the
	// caller: a network error (a refused or aborted connection to S3 or
	// etcd) is an I/O error of the file, not of the caller's socket.
	var e syscall.Errno
	if errors.As(err, &e) {
		switch e {
		case syscall.ENOSPC, syscall.EDQUOT, syscall.ENAMETOOLONG, syscall.EROFS, syscall.EACCES, syscall.EPERM:
			return e
		}
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
	fsys  *fsys
	path  string
	mu    sync.Mutex
	owner *pool.Owner // as a mkdir or chmod recorded it (nil: the daemon's, 0755)
}

// dirOwner is directory p's recorded owner (nil: none, the daemon's,
// 0755). While etcd does not answer it is the one last seen; never seen,
// it is the daemon's, 0700: a directory made private must not show open
// for want of its record.
func (f *fsys) dirOwner(p string) *pool.Owner {
	o, err := f.opts.Pool.DirOwner(context.Background(), p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if last, ok := f.dirOwners[p]; ok {
			return last
		}
		return &pool.Owner{Uid: f.uid, Gid: f.gid, Mode: 0o700}
	}
	if len(f.dirOwners) >= maxVersions {
		clear(f.dirOwners)
	}
	f.dirOwners[p] = o
	return o
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
	_ gofs.NodeSetattrer = (*dirNode)(nil)
)

func (n *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	o := n.owner
	n.mu.Unlock()
	n.fsys.dirAttr(&out.Attr, o)
	return 0
}

// Setattr applies a chmod or chown of a directory, kept in the pool
// (pool.SetDirOwner); the root's is the daemon's own and is not kept.
func (n *dirNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	mode, chmod := in.GetMode()
	uid, chown := in.GetUID()
	gid, chgrp := in.GetGID()
	if chmod || chown || chgrp {
		if n.path == "" {
			return syscall.EPERM
		}
		n.mu.Lock()
		o := pool.Owner{Uid: n.fsys.uid, Gid: n.fsys.gid, Mode: 0o755}
		if n.owner != nil {
			o = *n.owner
		}
		n.mu.Unlock()
		if chmod {
			o.Mode = mode & 0o7777
		}
		if chown {
			o.Uid = uid
		}
		if chgrp {
			o.Gid = gid
		}
		if err := n.fsys.opts.Pool.SetDirOwner(uninterrupted(ctx), n.path, o); err != nil {
			return errno(n.fsys.opts.Logger, "chmod "+n.path, err)
		}
		n.mu.Lock()
		n.owner = &o
		n.mu.Unlock()
	}
	return n.Getattr(ctx, fh, out)
}

// Fsync of a directory succeeds: a name is in etcd, durable, once the
// publish that set it returned (at the file's fsync or close), and a
// rename's or removal's transaction once it returned. Without it, a
// writer that syncs the directory after its renames (mlx.Writer, most
// databases and copying tools) failed with EOPNOTSUPP.
func (n *dirNode) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

var _ gofs.NodeFsyncer = (*dirNode)(nil)

// reserved says whether name is /.kvfs (ctl.go), which no file or
// directory of the pool is reached by, nor made as.
func (n *dirNode) reserved(name string) bool { return n.path == "" && name == ctlName }

// dirAttr fills a directory's attributes: its owner and mode as a mkdir
// recorded them (pool.SetDirOwner), or the daemon's, 0755.
func (f *fsys) dirAttr(a *fuse.Attr, o *pool.Owner) {
	a.Mode = syscall.S_IFDIR | 0o755
	a.Nlink = 2
	a.Uid, a.Gid = f.uid, f.gid
	if o != nil {
		a.Mode = syscall.S_IFDIR | o.Mode&0o7777
		a.Uid, a.Gid = o.Uid, o.Gid
	}
	a.SetTimes(&f.started, &f.started, &f.started)
}

// fileAttr fills a file's attributes: its owner and mode as recorded
// (pool.Owner), or, without a record, the daemon's, 0644.
func (f *fsys) fileAttr(a *fuse.Attr, size int64, o *pool.Owner) {
	a.Mode = syscall.S_IFREG | 0o644
	a.Nlink = 1
	a.Size = uint64(size)
	a.Blocks = (uint64(size) + 511) / 512
	a.Uid, a.Gid = f.uid, f.gid
	if o != nil {
		a.Mode = syscall.S_IFREG | o.Mode&0o7777
		a.Uid, a.Gid = o.Uid, o.Gid
	}
	a.SetTimes(&f.started, &f.started, &f.started)
}

func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.reserved(name) {
		n.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555)
		return n.NewInode(ctx, &ctlDir{fsys: n.fsys}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	p := join(n.path, name)
	// A file this mount is writing is its writer's node, whatever its
	// name points to in the pool meanwhile (a flush may have published
	// part of it): the node that a rename then moves, and that readers
	// here open, must be the one whose last publish is the whole file.
	if ch := n.GetChild(name); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok && f.writing() {
			if size, ok := f.writerSize(); ok {
				n.fsys.fileAttr(&out.Attr, size, f.ownerOf())
				return f.EmbeddedInode(), 0
			}
		}
	}
	file, dir, e := n.fsys.kind(p)
	if e != 0 {
		return nil, e
	}
	switch {
	case file:
		v, err := n.fsys.resolve(p)
		if e := errno(n.fsys.opts.Logger, "stat "+p, err); e != 0 {
			return nil, e
		}
		manifest, size := v.manifest, v.size
		n.fsys.opts.Pool.Saw(p) // kept from eviction (Pool.Saw)
		n.fsys.fileAttr(&out.Attr, size, v.owner)
		node := &fileNode{fsys: n.fsys, name: p, owner: v.owner}
		node.setVersion(manifest, size)
		// A new node for each lookup (go-fuse numbers it), never one
		// found by a number derived from the version: a node's version
		// changes when it is written here, and a node moves when it is
		// renamed, so such a number would hand a later lookup a node of
		// another version or under another name (review 22).
		return n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
	case dir:
		d := &dirNode{fsys: n.fsys, path: p, owner: n.fsys.dirOwner(p)}
		n.fsys.dirAttr(&out.Attr, d.owner)
		return n.NewInode(ctx, d, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	return nil, syscall.ENOENT
}

func (n *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	names, e := n.fsys.list()
	if e != 0 {
		return nil, e
	}
	ents := children(names, n.path)
	seen := map[string]bool{}
	for _, e := range ents {
		seen[e.Name] = true
	}
	prefix := ""
	if n.path != "" {
		prefix = n.path + "/"
	}
	n.fsys.mu.Lock()
	for d := range n.fsys.madeDir {
		if rest, ok := strings.CutPrefix(d, prefix); ok && !strings.Contains(rest, "/") && rest != "" && !seen[rest] {
			seen[rest] = true
			ents = append(ents, fuse.DirEntry{Name: rest, Mode: syscall.S_IFDIR})
		}
	}
	n.fsys.mu.Unlock()
	return gofs.NewListDirStream(ents), 0
}

// children are the entries of directory dir ("" the root) that the sorted
// names make: a file for each name in it, a directory for each prefix of
// names below it, once each.
func children(names []string, dir string) []fuse.DirEntry {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	seen := map[string]bool{}
	var ents []fuse.DirEntry
	i, _ := slices.BinarySearch(names, prefix)
	for ; i < len(names) && strings.HasPrefix(names[i], prefix); i++ {
		rest := names[i][len(prefix):]
		mode := uint32(syscall.S_IFREG)
		if child, _, isDir := strings.Cut(rest, "/"); isDir {
			rest, mode = child, syscall.S_IFDIR
		}
		if !seen[rest] {
			seen[rest] = true
			ents = append(ents, fuse.DirEntry{Name: rest, Mode: mode})
		}
	}
	return ents
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.reserved(name) {
		return nil, syscall.EEXIST
	}
	p := join(n.path, name)
	if file, dir, e := n.fsys.kind(p); e != 0 {
		return nil, e
	} else if file || dir {
		return nil, syscall.EEXIST
	}
	// Its maker's, with the mode asked (after the umask), kept in the
	// pool: every host shows it, and the kernel checks it.
	o := pool.Owner{Uid: n.fsys.uid, Gid: n.fsys.gid, Mode: mode & 0o7777}
	if c, ok := fuse.FromContext(ctx); ok {
		o.Uid, o.Gid = c.Uid, c.Gid
	}
	if err := n.fsys.opts.Pool.SetDirOwner(uninterrupted(ctx), p, o); err != nil {
		return nil, errno(n.fsys.opts.Logger, "mkdir "+p, err)
	}
	n.fsys.mu.Lock()
	n.fsys.madeDir[p] = true
	n.fsys.mu.Unlock()
	n.fsys.dirAttr(&out.Attr, &o)
	return n.NewInode(ctx, &dirNode{fsys: n.fsys, path: p, owner: &o}, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.reserved(name) {
		return syscall.EPERM
	}
	p := join(n.path, name)
	n.fsys.forget()
	names, e := n.fsys.list()
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
	if err := n.fsys.opts.Pool.RemoveDirOwner(uninterrupted(ctx), p); err != nil {
		n.fsys.opts.Logger.Warn("pool mount: rmdir: the directory's owner and mode stay recorded", "path", p, "err", err)
	}
	return 0
}

// fileChild is the file node the kernel knows under name in n, or nil.
func (n *dirNode) fileChild(name string) *fileNode {
	if ch := n.GetChild(name); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok {
			return f
		}
	}
	return nil
}

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.reserved(name) {
		return syscall.EISDIR
	}
	p := join(n.path, name)
	child := n.fileChild(name)
	if child != nil {
		// No publish of the child's writers runs meanwhile, and none
		// after: a file unlinked while open is not published.
		child.pub.Lock()
		defer child.pub.Unlock()
	}
	err := n.fsys.opts.Pool.Remove(uninterrupted(ctx), p)
	n.fsys.forget()
	if child != nil && errors.Is(err, fs.ErrNotExist) && child.unpublished() {
		err = nil // a new file being written here: only this mount knew it
	}
	if err == nil {
		n.fsys.saw(p, version{})
		if child != nil {
			child.setName("")
			child.unreserve(ctx)
		}
	}
	return errno(n.fsys.opts.Logger, "remove "+p, err)
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	to, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	if n.reserved(name) || to.reserved(newName) {
		return syscall.EPERM
	}
	if flags != 0 {
		return syscall.EINVAL
	}
	from, dst := join(n.path, name), join(to.path, newName)
	src, over := n.fileChild(name), to.fileChild(newName)
	if over == src {
		over = nil
	}
	// The renamed node's publishes, and those of the node it replaces,
	// wait for the rename: a publish that read the old name before the
	// rename and committed after it would put the new bytes back under
	// the old name (review 22).
	lockPub(src, over)
	defer unlockPub(src, over)
	var err error
	if src != nil && src.unpublished() {
		// A new file being written here, not yet published: its name is
		// this mount's until its first publish, which will be under dst.
		// The name it replaces goes now, as a rename over it would take it.
		if _, isDir, e := n.fsys.kind(dst); e != 0 {
			return e
		} else if isDir {
			return syscall.EISDIR
		}
		if err = n.fsys.opts.Pool.Remove(uninterrupted(ctx), dst); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	} else {
		if file, dir, e := n.fsys.kind(from); e != 0 {
			return e
		} else if !file && !dir {
			return syscall.ENOENT
		} else if !file {
			// Directories are prefixes of many names: renaming one is not
			// one transaction.
			return syscall.EOPNOTSUPP
		}
		err = n.fsys.opts.Pool.Rename(uninterrupted(ctx), from, dst)
	}
	n.fsys.forget()
	if err == nil {
		n.fsys.moved(from, dst)
		if src != nil {
			src.setName(dst)
			src.unreserve(ctx)
		}
		if over != nil {
			over.setName("") // replaced: its writers write an orphan now
		}
	}
	return errno(n.fsys.opts.Logger, "rename "+from, err)
}

// lockPub locks the publishes of up to two distinct nodes (either may be
// nil), in the order of their inode numbers, so that two renames never
// wait on each other.
func lockPub(a, b *fileNode) {
	if a != nil && b != nil && a.StableAttr().Ino > b.StableAttr().Ino {
		a, b = b, a
	}
	for _, x := range []*fileNode{a, b} {
		if x != nil {
			x.pub.Lock()
		}
	}
}

func unlockPub(a, b *fileNode) {
	for _, x := range []*fileNode{a, b} {
		if x != nil {
			x.pub.Unlock()
		}
	}
}

func (n *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if n.reserved(name) {
		return nil, nil, 0, syscall.EEXIST
	}
	p := join(n.path, name)
	file, dir, e := n.fsys.kind(p)
	switch {
	case e != 0:
		return nil, nil, 0, e
	case dir:
		return nil, nil, 0, syscall.EISDIR
	case file && flags&syscall.O_EXCL != 0:
		return nil, nil, 0, syscall.EEXIST
	}
	// Its creator's, with the mode asked (after the creator's umask),
	// recorded with the name at its publish (pool.Owner).
	node := &fileNode{fsys: n.fsys, name: p, owner: &pool.Owner{Uid: n.fsys.uid, Gid: n.fsys.gid, Mode: mode & 0o7777}}
	if c, ok := fuse.FromContext(ctx); ok {
		node.owner.Uid, node.owner.Gid = c.Uid, c.Gid
	}
	if file {
		// A create of a name that exists (O_CREAT, the kernel's entry
		// gone stale) writes it again: it keeps its owner and mode.
		node.keepOwner = true
		if v, err := n.fsys.resolve(p); err == nil {
			node.owner = v.owner
		}
	}
	if flags&syscall.O_EXCL != 0 {
		// Exclusive across hosts: the listing above may be a second
		// old, and another host may be creating the name now.
		if err := n.fsys.opts.Pool.Reserve(uninterrupted(ctx), p); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return nil, nil, 0, syscall.EEXIST
			}
			return nil, nil, 0, errno(n.fsys.opts.Logger, "create "+p, err)
		}
		node.reserved = p
	}
	w, e := n.fsys.newWriter(ctx, node, 0)
	if e != 0 {
		node.unreserve(ctx)
		return nil, nil, 0, e
	}
	w.publishEmpty = true // a new file is published at its release even if empty
	n.fsys.fileAttr(&out.Attr, 0, node.owner)
	return n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG}), w, fuse.FOPEN_DIRECT_IO, 0
}

// fileNode is a pool file.
//
// A node is one version of a file: the manifest its lookup found (or its
// writer published), whose size is what the node tells the kernel and
// whose bytes are what its opens read, whatever the name points to by
// then. A name replaced (here or on another host) is a new node at its
// next lookup (the kernel keeps entries for Timeout). Otherwise the kernel
// would cut a read of the new version at the old version's size, and an
// open of a node renamed here would look for its old name (the pool
// stress test saw both). A node written here again (an open with O_TRUNC)
// takes the version its writer publishes; a reader that had it open
// before reads the old version, and the two can meet in the kernel's page
// cache for that moment, the known gap of docs/READPATH.md ("readers
// racing an in-place truncation"). The engine writes a new file and
// renames it, which never does that.
type fileNode struct {
	gofs.Inode
	fsys *fsys

	// pub orders the publishes of the node's writers against renames and
	// unlinks of the node through this mount: a publish commits under the
	// name the node has for its whole duration.
	pub sync.Mutex

	mu sync.Mutex
	// name is the node's name in the pool: the one its lookup or
	// creation found, moved by renames through this mount, "" once
	// unlinked or renamed over here. It is kept here rather than taken
	// from the kernel's tree (Inode.Path), which go-fuse updates only
	// after a rename returns: a publish in between would use the old one.
	name     string
	reserved string // the name claimed by an exclusive create, until published (pool.Reserve)
	manifest string // "" for a new file not yet published
	size     int64
	owner    *pool.Owner // as its name had it, or as made or changed here
	// keepOwner: the node was created over a name that exists, whose
	// owner its first publish keeps.
	keepOwner bool
	writers   []*writer // open write handles
}

// pendingWriter is the newest writer of the node that the caller's
// process opened and that still waits for the truncation of an
// open(O_TRUNC) split in two (see writer.pending).
func (n *fileNode) pendingWriter(ctx context.Context) (*writer, bool) {
	caller := callerProcess(ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.writers) - 1; i >= 0; i-- {
		if w := n.writers[i]; w.pending.Load() && w.opener == caller {
			return w, true
		}
	}
	return nil, false
}

// unpublished reports whether the node is a new file being written here
// that has not been published yet: no host but this one knows it.
func (n *fileNode) unpublished() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.manifest == "" && len(n.writers) > 0
}

// recordsOwner reports whether the node's next publish records its
// owner and mode: a new file made here, not yet published.
func (n *fileNode) recordsOwner() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.manifest == "" && len(n.writers) > 0 && !n.keepOwner
}

// unreserve gives up the node's claim of an exclusive create, if any.
func (n *fileNode) unreserve(ctx context.Context) {
	n.mu.Lock()
	r := n.reserved
	n.reserved = ""
	n.mu.Unlock()
	if r != "" {
		n.fsys.opts.Pool.Unreserve(uninterrupted(ctx), r)
	}
}

func (n *fileNode) setName(name string) {
	n.mu.Lock()
	n.name = name
	n.mu.Unlock()
}

// writing reports whether the node has an open writer.
func (n *fileNode) writing() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.writers) > 0
}

// writerSize is the size of the bytes the node's last opened writer holds.
func (n *fileNode) writerSize() (int64, bool) {
	n.mu.Lock()
	var w *writer
	if len(n.writers) > 0 {
		w = n.writers[len(n.writers)-1]
	}
	n.mu.Unlock()
	if w == nil {
		return 0, false
	}
	return w.size()
}

func (n *fileNode) setVersion(manifest string, size int64) {
	n.mu.Lock()
	n.manifest, n.size = manifest, size
	n.mu.Unlock()
}

// ownerOf is the node's owner and mode (nil: none recorded).
func (n *fileNode) ownerOf() *pool.Owner {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.owner
}

func (n *fileNode) version() (string, int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.manifest, n.size
}

// path is the node's name in the pool now; "" once it has none.
func (n *fileNode) path() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.name
}

var (
	_ gofs.NodeOpener    = (*fileNode)(nil)
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeSetattrer = (*fileNode)(nil)
)

func (n *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	o := n.ownerOf()
	switch h := fh.(type) {
	case *writer:
		if size, ok := h.size(); ok {
			n.fsys.fileAttr(&out.Attr, size, o)
			return 0
		} // released: as the node is
	case *reader:
		// The size of the version this handle reads, not of what the name
		// points to now (another host may have replaced it).
		n.fsys.fileAttr(&out.Attr, h.f.Size(), o)
		return 0
	case *spoolReader:
		n.fsys.fileAttr(&out.Attr, h.size(), o)
		return 0
	}
	if manifest, size := n.version(); manifest != "" {
		n.fsys.fileAttr(&out.Attr, size, o) // this node's version's
		return 0
	}
	if size, ok := n.writerSize(); ok {
		n.fsys.fileAttr(&out.Attr, size, o) // a new file being written here
		return 0
	}
	// A new file whose writer has gone without publishing.
	p := n.path()
	_, size, owner, err := n.fsys.opts.Pool.ResolveOwned(uninterrupted(ctx), p)
	if e := errno(n.fsys.opts.Logger, "stat "+p, err); e != 0 {
		return e
	}
	n.fsys.fileAttr(&out.Attr, size, owner)
	return 0
}

// Setattr allows what cp and the engine's writer do to a file being
// written: truncate it; chmod and chown, kept with the name (pool.Owner);
// times are accepted and not kept. The kernel checks who may
// (default_permissions).
func (n *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.setOwner(ctx, in); e != 0 {
		return e
	}
	if sz, ok := in.GetSize(); ok {
		w, isW := fh.(*writer)
		if !isW && sz == 0 {
			// Without atomic O_TRUNC, Linux's open(O_TRUNC) is an open for
			// writing and then this truncation without a handle: it
			// belongs to the writer that open made, and must not publish
			// an empty file for other hosts to see meanwhile.
			w, isW = n.pendingWriter(ctx)
		}
		if !isW && sz == 0 {
			// truncate(path, 0): the file becomes empty, published as such.
			n.pub.Lock()
			defer n.pub.Unlock()
			p := n.path()
			if p == "" {
				return syscall.ENOENT
			}
			o := n.ownerOf()
			manifest, err := n.fsys.opts.Pool.PublishOwned(uninterrupted(ctx), p, bytes.NewReader(nil), 0, nil) // its owner stays
			n.fsys.forget()
			if e := errno(n.fsys.opts.Logger, "truncate "+p, err); e != 0 {
				return e
			}
			n.setVersion(manifest, 0)
			n.fsys.saw(p, version{manifest, 0, o})
			return n.Getattr(ctx, fh, out)
		}
		if !isW {
			return syscall.EOPNOTSUPP
		}
		w.mu.Lock()
		if w.pending.Load() && sz != 0 {
			w.mu.Unlock()
			return syscall.EOPNOTSUPP // a change in place
		}
		var err error = os.ErrClosed // a pending writer released meanwhile
		if !w.closed {
			err = w.spool.Truncate(int64(sz))
			if w.pending.Swap(false) {
				w.publishEmpty = true // the open(O_TRUNC)'s truncation
			} else {
				w.dirty = true
			}
		}
		w.mu.Unlock()
		if err != nil {
			return errno(n.fsys.opts.Logger, "truncate "+n.path(), err)
		}
		return n.Getattr(ctx, w, out) // the writer's size, not the version's
	}
	return n.Getattr(ctx, fh, out)
}

// setOwner applies a chmod or chown: kept with the name in the pool
// (pool.SetOwner) and on the node; a new file not yet published keeps it
// on the node, and its publish records it. Under the node's publish lock,
// so that a publish in flight records the owner it read.
func (n *fileNode) setOwner(ctx context.Context, in *fuse.SetAttrIn) syscall.Errno {
	mode, chmod := in.GetMode()
	uid, chown := in.GetUID()
	gid, chgrp := in.GetGID()
	if !chmod && !chown && !chgrp {
		return 0
	}
	n.pub.Lock()
	defer n.pub.Unlock()
	o := pool.Owner{Uid: n.fsys.uid, Gid: n.fsys.gid, Mode: 0o644}
	if cur := n.ownerOf(); cur != nil {
		o = *cur
	}
	if chmod {
		o.Mode = mode & 0o7777
	}
	if chown {
		o.Uid = uid
	}
	if chgrp {
		o.Gid = gid
	}
	if manifest, _ := n.version(); manifest != "" || !n.writing() {
		p := n.path()
		if p == "" {
			return syscall.ENOENT
		}
		if err := n.fsys.opts.Pool.SetOwner(uninterrupted(ctx), p, o); err != nil {
			return errno(n.fsys.opts.Logger, "chmod "+p, err)
		}
		n.fsys.forget()
	}
	n.mu.Lock()
	n.owner = &o
	n.mu.Unlock()
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	p := n.path()
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		var size int64
		if flags&syscall.O_TRUNC == 0 {
			// Writing into an empty file changes nothing in place.
			var err error
			size, err = n.fsys.opts.Pool.Stat(uninterrupted(ctx), p)
			if e := errno(n.fsys.opts.Logger, "stat "+p, err); e != 0 {
				return nil, 0, e
			}
			if size != 0 && (n.fsys.atomicTrunc || flags&(syscall.O_RDWR|syscall.O_APPEND) != 0) {
				return nil, 0, syscall.EOPNOTSUPP
			}
		}
		// size != 0: without atomic O_TRUNC (macOS), the truncation that
		// makes this a replacement comes next. Until it does, the writer
		// holds the file as it is: it writes nothing, publishes nothing.
		w, e := n.fsys.newWriter(ctx, n, size)
		if e != 0 {
			return nil, 0, e
		}
		if size == 0 {
			w.publishEmpty = true // truncated: the file becomes empty at its release
		}
		return w, fuse.FOPEN_DIRECT_IO, 0
	}
	manifest, _ := n.version()
	if manifest == "" {
		if r, e := n.openSpool(); r != nil || e != 0 {
			return r, fuse.FOPEN_DIRECT_IO, e
		}
	}
	var f *pool.File
	var err error
	if manifest != "" {
		f, err = n.fsys.opts.Pool.OpenVersion(uninterrupted(ctx), manifest, p)
		if errors.Is(err, fs.ErrNotExist) {
			// The version this node stands for is gone (a collection
			// rewrote its packs and moved its name to a copy, or it was
			// replaced and collected): the kernel's entry is stale, and
			// ESTALE makes it look the name up again, once.
			n.fsys.opts.Logger.Info("pool mount: open of a collected version; looked up again", "path", p, "manifest", manifest)
			return nil, 0, syscall.ESTALE
		}
	} else {
		f, err = n.fsys.opts.Pool.Open(uninterrupted(ctx), p) // a new file never published here
	}
	if e := errno(n.fsys.opts.Logger, "open "+p, err); e != 0 {
		return nil, 0, e
	}
	return &reader{f: f}, 0, 0
}

// openSpool opens, for reading, the bytes of the node's newest writer: a
// new file being written here reads here as it is written, as on a disk,
// before its first publish shows it to other hosts. The reader holds its
// own descriptor of the spool, which outlives the writer. nil, 0 if the
// node has no writer.
func (n *fileNode) openSpool() (*spoolReader, syscall.Errno) {
	for {
		n.mu.Lock()
		var w *writer
		if k := len(n.writers); k > 0 {
			w = n.writers[k-1]
		}
		n.mu.Unlock()
		if w == nil {
			return nil, 0
		}
		w.mu.Lock() // the spool stays open while the writer is locked
		if w.closed {
			w.mu.Unlock() // released meanwhile, and off the node: next
			continue
		}
		fd, err := syscall.Dup(int(w.spool.Fd()))
		w.mu.Unlock()
		if err != nil {
			return nil, errno(n.fsys.opts.Logger, "open "+n.path(), fmt.Errorf("dup spool: %w", err))
		}
		return &spoolReader{f: os.NewFile(uintptr(fd), w.spool.Name())}, 0
	}
}

// spoolReader reads a file not yet published from its writer's spool.
type spoolReader struct{ f *os.File }

var (
	_ gofs.FileReader   = (*spoolReader)(nil)
	_ gofs.FileReleaser = (*spoolReader)(nil)
)

func (r *spoolReader) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := r.f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (r *spoolReader) Release(ctx context.Context) syscall.Errno {
	r.f.Close()
	return 0
}

func (r *spoolReader) size() int64 {
	fi, err := r.f.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}

// reader reads a published file.
type reader struct{ f *pool.File }

var _ gofs.FileReader = (*reader)(nil)

func (r *reader) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := r.f.ReadAtContext(uninterrupted(ctx), dest, off)
	if err != nil && n < len(dest) && off+int64(n) < r.f.Size() {
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// writer is a file being written: a local spool, published at flush
// (close) and fsync when it changed.
type writer struct {
	fsys   *fsys
	node   *fileNode // the file's node: its name now, and the version published
	spool  *os.File
	opener uint32 // the process that opened it (callerProcess)

	// pending: opened for writing without O_TRUNC on a mount without
	// atomic O_TRUNC, and not truncated yet; the file's size is base.
	// Read without mu: a stat must not wait for a publish.
	pending atomic.Bool
	base    int64

	mu     sync.Mutex
	dirty  bool // written since its last publish
	closed bool // released: the spool is closed
	// publishEmpty: published at its fsync or release even if never
	// written (a file created, or truncated by open(O_TRUNC)), but not
	// at a flush, which may be a shell's redirection closing its first
	// descriptor before a single byte (cmd > file): other hosts would
	// see the file empty first.
	publishEmpty bool
	// failed is the error of a write that failed: the file is not
	// published.
	failed error
}

var (
	_ gofs.FileWriter   = (*writer)(nil)
	_ gofs.FileReader   = (*writer)(nil)
	_ gofs.FileFlusher  = (*writer)(nil)
	_ gofs.FileFsyncer  = (*writer)(nil)
	_ gofs.FileReleaser = (*writer)(nil)
)

// newWriter opens a writer of node; base > 0 makes it pending (see
// writer.pending) on a file of base bytes.
func (f *fsys) newWriter(ctx context.Context, node *fileNode, base int64) (*writer, syscall.Errno) {
	spool, err := os.CreateTemp(f.opts.SpoolDir, "spool-*")
	if err != nil {
		return nil, errno(f.opts.Logger, "spool", err)
	}
	// The spool keeps its name while open, so that a file that cannot
	// be published is kept by a rename, which needs no descriptor (the
	// daemon may be out of them: that may be why the publish failed).
	// Mount removes those a crash left.
	w := &writer{fsys: f, node: node, spool: spool, opener: callerProcess(ctx), base: base}
	w.pending.Store(base > 0)
	node.mu.Lock()
	node.writers = append(node.writers, w)
	node.mu.Unlock()
	return w, 0
}

// callerProcess is the process (thread group) of a request's caller; 0 if
// unknown. The kernel names the calling thread; a flush must be told
// from the opener's own close.
func callerProcess(ctx context.Context) uint32 {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Pid))
	if err != nil {
		return c.Pid // no /proc (macOS): the kernel gives the process
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
				return uint32(n)
			}
		}
	}
	return c.Pid
}

// size is the size of the writer's file; false once the writer is
// released (the caller then takes the node's version).
func (w *writer) size() (int64, bool) {
	if w.pending.Load() {
		return w.base, true
	}
	fi, err := w.spool.Stat()
	if err != nil {
		return 0, false
	}
	return fi.Size(), true
}

func (w *writer) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending.Load() {
		return 0, syscall.EOPNOTSUPP // no change in place
	}
	n, err := w.spool.WriteAt(data, off)
	w.dirty = true
	if err != nil {
		// The file is not what its writer wrote: it is not published
		// (a close reports the failure), so other hosts never see a
		// part of it. Its bytes are kept as those of any failed
		// publish are.
		w.failed = err
		return uint32(n), errno(w.fsys.opts.Logger, "write "+w.node.path(), err)
	}
	return uint32(n), 0
}

func (w *writer) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := w.spool.ReadAt(dest, off)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return nil, errno(w.fsys.opts.Logger, "read "+w.node.path(), err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// publish publishes the spool if it changed since it was last published
// (or, with final, if it must be published unwritten: publishEmpty).
func (w *writer) publish(ctx context.Context, final bool) syscall.Errno {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.dirty && !(final && w.publishEmpty) {
		return 0
	}
	w.node.pub.Lock()
	defer w.node.pub.Unlock()
	// Under the name the file has now: a rename through this mount
	// moved it, and a file unlinked while open is not published (its
	// bytes go with it, as on a disk).
	p := w.node.path()
	if p == "" {
		w.dirty, w.publishEmpty = false, false
		return 0
	}
	if w.failed != nil {
		return errno(w.fsys.opts.Logger, "publish "+p, fmt.Errorf("an earlier write failed: %w", w.failed))
	}
	fi, err := w.spool.Stat()
	if err != nil {
		return errno(w.fsys.opts.Logger, "publish "+p, err)
	}
	// A file made here records its owner and mode at its first publish;
	// one written again keeps those its name has (a chmod on another
	// host is not undone by this node's view of it).
	o := w.node.ownerOf()
	var record *pool.Owner
	if w.node.recordsOwner() {
		record = o
	}
	manifest, err := w.fsys.opts.Pool.PublishOwned(uninterrupted(ctx), p, w.spool, fi.Size(), record)
	if err != nil {
		return errno(w.fsys.opts.Logger, "publish "+p, err)
	}
	w.node.setVersion(manifest, fi.Size())
	w.node.unreserve(ctx) // the name itself excludes other creates now
	w.fsys.saw(p, version{manifest, fi.Size(), o})
	w.dirty, w.publishEmpty = false, false
	w.fsys.forget()
	w.fsys.mu.Lock()
	for d := path.Dir(p); d != "." && d != ""; d = path.Dir(d) {
		delete(w.fsys.madeDir, d)
	}
	w.fsys.mu.Unlock()
	return 0
}

// Flush publishes at the opener's close, so that close(2) reports a
// failure. A flush from another process is a child that inherited the
// descriptor closing its copy (every fork and exec of the writer does),
// in the middle of the writer's writes: publishing then would show other
// hosts a part of the file. The release publishes in any case.
func (w *writer) Flush(ctx context.Context) syscall.Errno {
	if p := callerProcess(ctx); p != 0 && w.opener != 0 && p != w.opener {
		return 0
	}
	return w.publish(uninterrupted(ctx), false)
}

func (w *writer) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return w.publish(context.WithoutCancel(ctx), true)
}

func (w *writer) Release(ctx context.Context) syscall.Errno {
	e := w.publish(context.WithoutCancel(ctx), true)
	if e != 0 {
		w.keep()
	}
	// Off the node before the spool closes: a lookup meanwhile must not
	// take its size from a closed spool (review 22).
	n := w.node
	n.mu.Lock()
	n.writers = slices.DeleteFunc(n.writers, func(x *writer) bool { return x == w })
	last := len(n.writers) == 0
	n.mu.Unlock()
	if last {
		n.unreserve(ctx) // not published: the name is free again
	}
	w.mu.Lock()
	w.closed = true
	if e == 0 {
		os.Remove(w.spool.Name())
	}
	w.spool.Close()
	w.mu.Unlock()
	return e
}

// copySpool copies an open spool's bytes into a new file at dst.
func copySpool(spool *os.File, dst string) error {
	fi, err := spool.Stat()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.NewSectionReader(spool, 0, fi.Size()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// keep saves the bytes of a file whose last publish failed (S3 or etcd
// unreachable at its close) in the spool directory under a name that says
// so, and logs how to publish them: the writer's close reported the
// error, but the bytes are not thrown away with the spool. The spool is
// renamed, not copied: no descriptor, no second copy of the bytes.
func (w *writer) keep() {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.fsys.opts.Logger
	name := w.node.path()
	base := strings.Map(func(r rune) rune {
		if r == '/' || r < ' ' || r == utf8.RuneError {
			return '_'
		}
		return r
	}, path.Base(name))
	if len(base) > 128 {
		base = base[:128]
	}
	if !utf8.ValidString(base) {
		base = strings.ToValidUTF8(base, "_")
	}
	id := strings.TrimPrefix(filepath.Base(w.spool.Name()), "spool-")
	kept := filepath.Join(w.fsys.opts.SpoolDir, "unpublished-"+time.Now().UTC().Format("20060102T150405")+"-"+id+"-"+base)
	if err := os.Rename(w.spool.Name(), kept); err != nil {
		// The spool's name is gone (removed by hand?): copy its bytes
		// through the open descriptor, which needs one more.
		if err = copySpool(w.spool, kept); err != nil {
			log.Error("pool mount: the bytes of a file not published are lost", "path", name, "err", err)
			return
		}
	}
	log.Error("pool mount: a file could not be published at its close; its bytes are kept",
		"path", name, "kept", kept, "publish them with", "kvfs pool put "+kept+" "+name)
}
