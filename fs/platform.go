package fs

import "syscall"

// platform is what kvfs answers differently to Linux's FUSE and to
// macFUSE: each part is decided by portable code (renameflags.go,
// opencache.go, xattrnames.go, xattrflags.go, allocate.go) from a table, so that both
// platforms' tables are tested on Linux; hostPlatform (platform_linux.go,
// platform_other.go) picks the build's.
type platform struct {
	rename     renameEncoding
	pageCache  pageCache
	xattrNames xattrNames
	xattrFlags xattrFlags
	// noAttr answers a missing attribute: ENODATA on Linux; ENOATTR
	// on macOS, where ENODATA is a STREAMS error that xattr callers
	// (Finder, xattr(1), CoreFoundation) do not take for "no such
	// attribute".
	noAttr syscall.Errno
	alloc  []allocBit
	// notify: the kernel takes notifications (notify.go). go-fuse sends
	// none on darwin: macFUSE has none.
	notify bool
}

// darwinENOATTR is ENOATTR in darwin's sys/errno.h (syscall defines it
// only for darwin and the BSDs; opencache_darwin.go checks the value).
const darwinENOATTR = syscall.Errno(93)

func linuxPlatform() platform {
	return platform{rename: linuxRename(), pageCache: dropUnlessKept, xattrNames: userNames, xattrFlags: linuxXattrFlags(), noAttr: syscall.ENODATA, alloc: linuxAlloc(), notify: true}
}

func darwinPlatform() platform {
	return platform{rename: darwinRename(), pageCache: keptUntilPurged, xattrNames: anyNames, xattrFlags: darwinXattrFlags(), noAttr: darwinENOATTR, alloc: darwinAlloc()}
}
