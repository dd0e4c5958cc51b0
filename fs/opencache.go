package fs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// pageCache is how a kernel keeps a file's cached pages across opens,
// which decides what an open must answer for them.
type pageCache int

const (
	// dropUnlessKept: Linux drops a file's pages at open unless the
	// open answers FOPEN_KEEP_CACHE.
	dropUnlessKept pageCache = iota
	// keptUntilPurged: macFUSE ignores FOPEN_KEEP_CACHE and keeps a
	// vnode's pages (the UBC) across opens until an open answers
	// FOPEN_PURGE_UBC, getattr shows another size, or auto_cache sees
	// another mtime. A file rewritten with the same size and within the
	// mtime's granularity would serve its old pages.
	keptUntilPurged
)

// macFUSE's open flags (go-fuse's fuse/types_darwin.go, where only darwin
// builds see them; platform_darwin.go checks that they agree).
const (
	fopenPurgeAttr = 1 << 30 // FOPEN_PURGE_ATTR: drop the cached attributes
	fopenPurgeUBC  = 1 << 31 // FOPEN_PURGE_UBC: drop the cached pages
)

// openCacheFlags is what a read open answers about the pages the kernel
// has cached for the file: keep them when they are of the version being
// opened (sameVersion), drop them otherwise. On macFUSE dropping is an
// explicit purge of the pages and, with them, the attributes (macFUSE
// honours FOPEN_PURGE_ATTR only with FOPEN_PURGE_UBC). It never answers
// FOPEN_DIRECT_IO: kvfs files are mmapped (the engine restores
// snapshots that way), and mmap of a direct-I/O file fails with ENODEV.
func openCacheFlags(pc pageCache, sameVersion bool) uint32 {
	switch {
	case sameVersion:
		// Ignored by macFUSE, where the pages stay anyway.
		return fuse.FOPEN_KEEP_CACHE
	case pc == keptUntilPurged:
		return fopenPurgeUBC | fopenPurgeAttr
	}
	return 0
}

// writeOpenFlags is what an open for writing answers. A handle open only
// for writing (cp, dd, an engine saving a snapshot) writes around the
// kernel's page cache (FOPEN_DIRECT_IO): each write(2) goes to the daemon
// from the writer's own pages, where through the page cache the kernel
// first copied it into the file's pages and then out of them into the
// request, and served the writes one at a time, each waiting for the
// copy of the one before (issue 28: 1 GB/s for one writer of 1 MiB
// writes on a 16-core host where a daemon that keeps nothing took as
// long; direct, twice that). Nothing is lost: such a handle cannot
// read, nor be mapped (mmap needs a readable descriptor), and the kernel
// drops the cached pages each direct write covers (FUSE_DIRECT_IO_ALLOW_MMAP,
// negotiated with it), so readers of the file through other handles read
// the new bytes from the daemon, as they did. A handle that also reads
// (O_RDWR) keeps the page cache: an engine may map it.
func (fsys *FS) writeOpenFlags(flags uint32) uint32 {
	if fsys.directWrites.Load() && flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}
