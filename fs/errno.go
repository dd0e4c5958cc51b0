package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"log/slog"
	"syscall"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
)

// errno maps an error from the store to the errno a FUSE call returns,
// and counts it by errno for the metrics. The first EMFILE and ENFILE are
// logged with the descriptor limit (fsys.fds); later ones are only
// counted, so a daemon out of descriptors does not flood its log.
func (fsys *FS) errno(op string, err error) syscall.Errno {
	if fsys.fds != nil {
		fsys.fds.Note(err)
	}
	e := mapErrno(fsys.log, op, err)
	if e != 0 {
		fsys.Metrics.countError(e)
	}
	return e
}

// mapErrno is the only mapping from errors to errnos, built on errors.Is
// and errors.As (never fs.ToErrno, which answers ENOSYS for wrapped
// errors). Errors that mean lost or corrupt data, and errors nobody
// expected, are logged before they become EIO.
func mapErrno(log *slog.Logger, op string, err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, blockstore.ErrCorrupt), errors.Is(err, store.ErrBlobMismatch):
		log.Error(op, "err", err)
		return syscall.EIO
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.As(err, &e):
		return e
	case errors.Is(err, iofs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, iofs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, manifest.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, manifest.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, manifest.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, store.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, iofs.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, iofs.ErrPermission), errors.Is(err, store.ErrReadOnly):
		return syscall.EPERM
	case errors.Is(err, store.ErrNoAttr):
		// ENODATA on Linux, ENOATTR on macOS (platform.go).
		return hostPlatform().noAttr
	case errors.Is(err, store.ErrXattrTooBig):
		return syscall.E2BIG
	case errors.Is(err, store.ErrXattrNoSpace):
		return syscall.ENOSPC
	}
	log.Error(op, "err", err)
	return syscall.EIO
}
