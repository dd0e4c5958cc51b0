package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
)

// TestErrnoMapping checks the one mapping from store errors to errnos,
// through the wrapping that store errors carry.
func TestErrnoMapping(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("op %q: %w", "x", fmt.Errorf("inner: %w", err)) }
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{wrap(iofs.ErrNotExist), syscall.ENOENT},
		{wrap(iofs.ErrExist), syscall.EEXIST},
		{wrap(manifest.ErrNotDir), syscall.ENOTDIR},
		{wrap(manifest.ErrIsDir), syscall.EISDIR},
		{wrap(manifest.ErrNotEmpty), syscall.ENOTEMPTY},
		{wrap(iofs.ErrInvalid), syscall.EINVAL},
		{wrap(store.ErrNoAttr), syscall.ENODATA},
		{wrap(store.ErrReadOnly), syscall.EPERM},
		{wrap(&blockstore.ChunkError{Err: blockstore.ErrCorrupt}), syscall.EIO},
		{wrap(store.ErrBlobMismatch), syscall.EIO},
		{wrap(context.Canceled), syscall.EINTR},
		{wrap(&os.PathError{Op: "write", Path: "p", Err: syscall.ENOSPC}), syscall.ENOSPC},
		{wrap(errors.New("surprise")), syscall.EIO},
	} {
		if got := mapErrno(slog.New(slog.DiscardHandler), "test", c.err); got != c.want {
			t.Errorf("%v: errno %v, want %v", c.err, got, c.want)
		}
	}
}
