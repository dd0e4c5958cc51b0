package blockstore

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Allocate gives [off, off+n) of f disk space (fallocate), holes included,
// without changing its content or, where the range ends before the end of
// the file, its size. Writes into allocated space cannot fail for want of
// space. It fails with errors.ErrUnsupported where the filesystem cannot
// allocate ahead.
func Allocate(f *os.File, off, n int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, off, n)
		switch {
		case err == nil:
			return nil
		case err == syscall.EINTR:
			continue
		case err == syscall.EOPNOTSUPP || err == syscall.ENOSYS:
			err = errors.ErrUnsupported
		}
		return fmt.Errorf("allocate %s [%d,+%d): %w", f.Name(), off, n, err)
	}
}
