package fs

import (
	"math"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: allocate past the end of the
// file without moving it.
const fallocKeepSize = 1

// allocateAhead gives [off, off+n) of f disk space without changing its
// size: a write into that range later cannot fail for want of space. The
// blocks past the end of the file are freed by a truncation to any size
// (ext4 and xfs drop preallocated blocks past EOF on truncate).
func allocateAhead(f *os.File, off, n int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), fallocKeepSize, off, n)
		if err != syscall.EINTR {
			return err
		}
	}
}

// fileSizeLimit is the process's RLIMIT_FSIZE in bytes (math.MaxInt64 when
// unlimited or unknown).
func fileSizeLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &rl); err != nil || rl.Cur >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(rl.Cur)
}
