package fs

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to
// disk, without waiting for it (sync_file_range SYNC_FILE_RANGE_WRITE).
// It promises nothing about durability; a failure is only a missed
// head start, so it is not reported.
func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
