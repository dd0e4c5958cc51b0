package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options.SimulateDarwin makes a Linux mount behave as the darwin build
// does where Linux's FUSE can, so that kvfs's strategy for staleness
// without notifications is exercised by a real kernel (the tests run in
// it: tests/doc.go; docs/MACOS.md says what it does not cover).
//
// Simulated (each as the darwin build does it, or as macFUSE behaves):
//   - no notifications at all (FS.notify, notify.go);
//   - the darwin entry, attribute and negative timeouts (the caller's
//     Options.Timeout: kvfs mount passes macOS's);
//   - macFUSE's page cache: pages survive every open unless the open
//     purges them (darwinPageCache, below), and a size change seen in
//     getattr drops them, an mtime change alone does not (no
//     FUSE_AUTO_INVAL_DATA: macFUSE's default, without auto_cache);
//   - no splice (reads are copied), no writeback cache, no READDIRPLUS,
//     no FUSE_HANDLE_KILLPRIV_V2 (the kernel clears set-ID bits itself),
//     no FOPEN_NOFLUSH (FUSE 7.19 has none: read handles are flushed).
//
// Not simulated: the rest of the darwin table (platform.go). Renames,
// xattr flags, fallocate modes and the missing-attribute errno arrive
// from and go back to a Linux kernel in Linux's encoding, which darwin's
// decoders would misread (ENOATTR is 93, Linux's EPROTONOSUPPORT), and
// Linux sends xattr names with namespaces (trusted., security.) that
// darwin's any-name rule would store. Nor macFUSE's 1 MiB iosize, its
// FUSE protocol 7.19, or its vnode cache.

// simulatedDarwin returns the mount's settings changed as SimulateDarwin
// says (see above).
func simulatedDarwin(fsys *FS, mo *fuse.MountOptions, opts *Options) {
	darwin := darwinPlatform()
	fsys.notify = darwin.notify
	fsys.pageCache = darwin.pageCache
	fsys.splice = false
	fsys.killpriv = false
	opts.WritebackCache = false
	mo.DisableSplice = true
	mo.DisableReadDirPlus = true
	mo.DisabledCapabilities |= fuse.CAP_AUTO_INVAL_DATA | fuse.CAP_READDIRPLUS | fuse.CAP_WRITEBACK_CACHE
}

// darwinPageCache makes the flags of an open's reply, as opencache.go
// decides them for macFUSE (keptUntilPurged), into what Linux does with
// the pages as macFUSE would: macFUSE ignores FOPEN_KEEP_CACHE and keeps a
// file's pages across every open, read or write, unless the open says
// FOPEN_PURGE_UBC. Linux keeps them only with FOPEN_KEEP_CACHE, so every
// open that does not purge keeps them (FOPEN_KEEP_CACHE), and one that
// purges drops them (no FOPEN_KEEP_CACHE); the purge flags, which Linux
// does not know, are taken out. FOPEN_PURGE_ATTR has no Linux
// counterpart at open: the attributes expire within the timeout instead
// (docs/MACOS.md). FOPEN_NOFLUSH, which FUSE 7.19 does not have, is
// taken out too.
func darwinPageCache(fl uint32) uint32 {
	if fl&fopenPurgeUBC != 0 {
		fl &^= fuse.FOPEN_KEEP_CACHE
	} else {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	return fl &^ (fopenPurgeUBC | fopenPurgeAttr | fuse.FOPEN_NOFLUSH)
}
