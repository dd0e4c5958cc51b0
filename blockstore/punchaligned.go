package blockstore

import (
	"errors"
	"os"
	"syscall"
)

// punchAligned frees [off, off+n) of f where the platform's punch takes
// only whole blocks of size block (macOS's F_PUNCHHOLE: "holes must be
// aligned to file system block boundaries", fcntl(2)). The whole blocks
// inside go through punch; the partial head and tail, and the whole range
// where punch says the filesystem cannot (unsupported: HFS+, SMB, exFAT),
// are written as zeros. Either way the range reads as zeros, as Punch
// promises; space not freed stays counted dead in the pack until
// compaction rewrites it (store/compact.go).
func punchAligned(f *os.File, off, n, block int64, punch func(off, n int64) error, unsupported func(error) bool) error {
	holeOff, holeLen := alignedHole(off, n, block)
	if holeLen == 0 {
		return zeroRange(f, off, n)
	}
	if err := punch(holeOff, holeLen); err != nil {
		if !unsupported(err) {
			return err
		}
		return zeroRange(f, off, n)
	}
	if err := zeroRange(f, off, holeOff-off); err != nil {
		return err
	}
	return zeroRange(f, holeOff+holeLen, off+n-holeOff-holeLen)
}

// alignedHole is the block-aligned part of [off, off+n): the whole blocks
// it covers, or a zero length where it covers none.
func alignedHole(off, n, block int64) (holeOff, holeLen int64) {
	if block <= 0 || n <= 0 {
		return off, 0
	}
	start := (off + block - 1) / block * block
	end := (off + n) / block * block
	if end <= start {
		return off, 0
	}
	return start, end - start
}

// punchUnsupported says the filesystem cannot punch: the errnos of a
// filesystem without the operation (ENOTSUP, EOPNOTSUPP, ENOSYS, ENOTTY
// for an unknown fcntl or ioctl) and EINVAL, which some answer for a
// range they will not punch.
func punchUnsupported(err error) bool {
	// A list, not a switch: ENOTSUP is EOPNOTSUPP on Linux.
	for _, e := range []syscall.Errno{syscall.ENOTSUP, syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.ENOTTY, syscall.EINVAL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// zeroRange writes zeros over [off, off+n): the bytes read as a punched
// range does, though the space stays allocated.
func zeroRange(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	zeros := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}
