package fs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The portable copies of darwin's values (opencache.go, platform.go, xattrflags.go) are
// darwin's own: a constant index out of range fails the darwin build if
// they ever differ.
var (
	_ = [1]struct{}{}[fopenPurgeUBC^fuse.FOPEN_PURGE_UBC]
	_ = [1]struct{}{}[fopenPurgeAttr^fuse.FOPEN_PURGE_ATTR]
	_ = [1]struct{}{}[darwinENOATTR^syscall.ENOATTR]
	_ = [1]struct{}{}[darwinXattrCreate^unix.XATTR_CREATE]
	_ = [1]struct{}{}[darwinXattrReplace^unix.XATTR_REPLACE]
)
