package fs

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/internal/fdlimit"
	"github.com/kvfs/kvfs/store"
)

// Options configure a mount.
type Options struct {
	Logger     *slog.Logger
	AllowOther bool // let other users than the mounter use the mount
	DebugFUSE  bool // log every FUSE request
	// Timeout is the kernel's entry and attribute timeout.
	Timeout time.Duration
	// Metrics, if set, is where the filesystem counts its work: the
	// daemon makes it before it opens the store, so that the store's
	// journal reports its syncs there too (Metrics.JournalSynced). Nil:
	// Mount makes its own.
	Metrics *Metrics
	// ExpireEvery is how often blobs past their grace period are
	// released; 0 means a minute.
	ExpireEvery time.Duration
	// NoWriteHash turns off hashing chunks as they are written, leaving
	// it to the commit (for measuring what it saves).
	NoWriteHash bool
	// WritebackCache asks the kernel to cache writes (FUSE's writeback
	// cache, -o writeback_cache): write(2) fills the page cache and the
	// kernel sends the dirty pages as large requests at writeback, close
	// and fsync, serves reads of them itself, and keeps the file's size
	// and times (see docs/READPATH.md).
	WritebackCache bool
	// BufferedWrites sends writes through the kernel's page cache even
	// for handles open only for writing (see directWrites), as before
	// (for measuring what direct writes save).
	BufferedWrites bool
	// NoKillpriv leaves clearing set-ID bits at writes, truncates and
	// chowns to the kernel, as before FUSE_HANDLE_KILLPRIV_V2: it then
	// asks for security.capability before every write(2) (for measuring
	// what handling it in the daemon saves; see killPrivs).
	NoKillpriv bool
	// NoMemSpool keeps every spool in a file, as before small files'
	// spools were held in memory (memspool.go): for tests that need a
	// descriptor per file open for writing, and for measurements.
	NoMemSpool bool
	// KernelOptions are mount options for the kernel, as mount(8) takes
	// them: ro (the kernel refuses every change with EROFS), noexec,
	// nosuid, nodev and their opposites.
	KernelOptions []string
	// SimulateDarwin makes the mount behave as the darwin build does
	// where Linux can (simdarwin.go): no notifications, macFUSE's page
	// cache across opens, no splice, writeback cache, READDIRPLUS or
	// killpriv. For tests of the darwin strategy on a real kernel
	// (kvfs mount --simulate-darwin, which also sets macOS's Timeout).
	SimulateDarwin bool
}

// FS is a mounted store.
type FS struct {
	s     *store.Store
	log   *slog.Logger
	spool string    // directory of spool files
	views viewCache // resolved blocks-layout snapshots for /.kvfs/whole
	// prefixViews are the made views of /.kvfs/prefix (prefixview.go).
	prefixViews prefixCache
	// walks are the recent lookups of view nodes, by caller (lease.go).
	walks walks
	// fileLeases hold the versions that lookups found for the looking
	// threads' opens (filelease.go).
	fileLeases fileLeases
	// refusals bounds the logging of views that do not exist.
	refusals logLimit
	// splice says replies may be spliced: the kernel lets pipes grow.
	// Each reply is spliced only if it fits the pipe size limit (see
	// spliceResult and RaisePipeLimit).
	splice bool
	// Metrics instruments the filesystem's work, for --metrics.
	Metrics *Metrics
	// fds logs running out of descriptors, once per kind.
	fds *fdlimit.Reporter
	// noWriteHash: see Options.NoWriteHash.
	noWriteHash bool
	// memSpools bounds the spools held in memory (memspool.go).
	memSpools *memBudget
	// asyncMem bounds the bytes of writes answered before they landed
	// (fs/asyncwrite.go), across the daemon's files.
	asyncMem *asyncBudget
	// killpriv says the kernel leaves clearing set-ID bits to the daemon
	// (FUSE_HANDLE_KILLPRIV_V2 negotiated; see killPrivs).
	killpriv bool
	// notify says the kernel is told of changes made behind its back
	// (notify.go); not on macFUSE, nor when simulating it.
	notify bool
	// directWrites: handles open only for writing write around the
	// kernel's page cache (FOPEN_DIRECT_IO; see writeOpenFlags). Set
	// once the kernel's INIT shows it drops the pages a direct write
	// covers.
	directWrites atomic.Bool
	// pageCache is how the kernel keeps a file's pages across opens,
	// which decides what opens answer (opencache.go): the host's, or
	// macFUSE's when simulating it.
	pageCache pageCache
}

// requestBytes is the size of FUSE read and write requests (and of the
// mount's readahead), large enough for snapshot-sized sequential I/O.
const requestBytes = 1 << 20

// Server is a mounted store being served.
type Server struct {
	*fuse.Server
	root *dirNode
}

// Metrics returns the filesystem's metrics, to register on the daemon's
// Prometheus registry.
func (s *Server) Metrics() *Metrics { return s.root.fsys.Metrics }

// Invalidate tells the kernel that the entry at path (relative to the
// mount) changed without going through the mount — a put, remove or
// rename through the control socket — so that its next lookup asks kvfs.
// The first component that go-fuse does not know is where the kernel's
// knowledge ends; the kernel may still hold a negative entry for it (a
// failed lookup of a directory that the put then created), so that one
// is invalidated too.
func (s *Server) Invalidate(path string) {
	n := &s.root.Inode
	comps := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	for i, c := range comps {
		ch := n.GetChild(c)
		if i == len(comps)-1 || ch == nil {
			s.root.fsys.notifyEntry(n, c)
			return
		}
		n = ch
	}
}

// Mount mounts s at mnt and returns the server, already serving. As root it
// mounts directly (no fusermount); otherwise through fusermount3.
func Mount(mnt string, s *store.Store, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Hour
	}
	fsys := &FS{s: s, log: opts.Logger, spool: filepath.Join(s.Dir(), "spool"),
		fds: fdlimit.NewReporter(opts.Logger, "filesystem"), Metrics: opts.Metrics, noWriteHash: opts.NoWriteHash,
	}
	if fsys.Metrics == nil {
		fsys.Metrics = NewMetrics()
	}
	if !opts.NoMemSpool {
		fsys.memSpools = newMemBudget(memSpoolMax, memSpoolTotal)
	}
	fsys.asyncMem = newAsyncBudget(asyncTotal)
	fsys.splice = canSplice
	fsys.killpriv = killprivCap != 0 && !opts.NoKillpriv
	fsys.notify = hostPlatform().notify
	fsys.pageCache = hostPlatform().pageCache
	root := &dirNode{node: node{fsys: fsys}}
	root.ino.Store(1)
	// go-fuse's own messages are diagnostics (warnings, panics in
	// handlers); with --debug-fuse its request traces too, at debug.
	golog := slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)
	if opts.DebugFUSE {
		golog = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)
	}
	fo := &gofs.Options{
		EntryTimeout: &opts.Timeout,
		AttrTimeout:  &opts.Timeout,
		// A name that is missing stays missing until it is created
		// through the mount (the kernel turns its negative entry into
		// the new one) or through the control socket (Invalidate).
		// Names that may appear otherwise, blocks/<sha256> adopted at
		// lookup and the /.kvfs views, reply uncached misses
		// (uncachedMiss).
		NegativeTimeout: &opts.Timeout,
		// Modes are the caller's: go-fuse would turn a mode of 0000 into
		// 0644 (0755 for a directory).
		NullPermissions: true,
		Logger:          golog,
		RootStableAttr:  &gofs.StableAttr{Ino: 1},
		MountOptions: fuse.MountOptions{
			FsName:            s.Dir(),
			Name:              "kvfs",
			AllowOther:        opts.AllowOther,
			MaxWrite:          requestBytes,
			MaxReadAhead:      requestBytes,
			Debug:             opts.DebugFUSE,
			Logger:            golog,
			DirectMountStrict: os.Geteuid() == 0,
			DirectMountFlags:  directMountFlags(opts.KernelOptions),
			Options:           append([]string{"default_permissions"}, opts.KernelOptions...),
		},
	}
	if opts.SimulateDarwin {
		simulatedDarwin(fsys, &fo.MountOptions, &opts)
	}
	if fsys.killpriv {
		// Without it the kernel asks for security.capability before
		// every write(2) (file_remove_privs: FUSE clears SB_NOSEC), a
		// round trip per write call. With it the kernel asks once, then
		// trusts the inode until its attributes are next refreshed, and
		// the daemon clears set-ID bits (killPrivs).
		fo.MountOptions.ExtraCapabilities |= killprivCap
	}
	if opts.WritebackCache {
		fo.MountOptions.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	// Not with NoKillpriv: a direct write leaves clearing set-ID bits to
	// the daemon (FUSE_WRITE_KILL_SUIDGID) where a buffered one has the
	// kernel clear them, and NoKillpriv measures the kernel's way.
	directWrites := !opts.BufferedWrites && !opts.WritebackCache && !opts.SimulateDarwin &&
		!opts.NoKillpriv && fsys.pageCache == dropUnlessKept
	if directWrites {
		// The kernel then drops the cached pages that a direct write
		// covers, so that a reader of the file does not go on reading
		// the ones from before it.
		fo.MountOptions.ExtraCapabilities |= fuse.CAP_DIRECT_IO_ALLOW_MMAP
	}
	srv, err := fuse.NewServer(&rawReplies{RawFileSystem: gofs.NewNodeFS(root, fo), attrTimeout: opts.Timeout, killpriv: fsys.killpriv,
		darwinPages: opts.SimulateDarwin}, mnt, &fo.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", s.Dir(), mnt, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", s.Dir(), mnt, err)
	}
	// Only a kernel that drops the cached pages a direct write covers
	// (6.6 and later: FUSE_DIRECT_IO_ALLOW_MMAP) gets direct writes:
	// before it, a reader holding pages of the file could go on reading
	// them after a direct write changed the bytes.
	fsys.directWrites.Store(directWrites && srv.KernelSettings().Flags64()&fuse.CAP_DIRECT_IO_ALLOW_MMAP != 0)
	setReadahead(mnt, requestBytes/1024, opts.Logger)
	if opts.ExpireEvery == 0 {
		opts.ExpireEvery = time.Minute
	}
	go fsys.expireBlobs(srv, opts.ExpireEvery)
	return &Server{Server: srv, root: root}, nil
}

// expireBlobs releases blobs past their grace period until the server
// stops.
func (fsys *FS) expireBlobs(srv *fuse.Server, every time.Duration) {
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			if n, err := fsys.s.ExpireBlobs(now); err != nil {
				fsys.log.Warn("expire blobs", "err", err)
			} else if n > 0 {
				fsys.log.Info("released blobs past their grace period", "blobs", n)
			}
		}
	}
}

// setReadahead raises the mount's readahead to match the request size, so
// that sequential reads arrive as 1 MiB requests (root only; best effort).
func setReadahead(mnt string, kb int, log *slog.Logger) {
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return
	}
	major, minor := (st.Dev>>8)&0xfff, (st.Dev&0xff)|((st.Dev>>12)&0xfff00)
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor)
	if err := os.WriteFile(p, []byte(fmt.Sprint(kb)), 0o644); err != nil {
		log.Debug("cannot raise readahead", "path", p, "err", err)
	}
}
