package blockstore

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyRange copies n bytes from src at srcOff to dst at dstOff with
// copy_file_range, falling back to a user-space copy where the kernel
// refuses (cross-device on old kernels, some filesystems).
func copyRange(src *os.File, srcOff int64, dst *os.File, dstOff, n int64) error {
	for n > 0 {
		k, err := unix.CopyFileRange(int(src.Fd()), &srcOff, int(dst.Fd()), &dstOff, int(min(n, 1<<30)), 0)
		switch {
		case err == unix.EINTR:
			continue
		case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL):
			return copyUser(src, srcOff, dst, dstOff, n)
		case err != nil:
			return &os.PathError{Op: "copy_file_range", Path: dst.Name(), Err: err}
		case k == 0:
			return io.ErrUnexpectedEOF
		}
		n -= int64(k)
	}
	return nil
}

func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

func adviseSequential(f *os.File) {
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
}
