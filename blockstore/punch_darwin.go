package blockstore

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// punchHole frees the whole blocks of the range with F_PUNCHHOLE (APFS)
// and zeroes the rest, or all of it where the filesystem cannot punch
// (punchAligned).
func punchHole(f *os.File, off, n int64) error {
	block := int64(4096) // APFS's
	if fi, err := f.Stat(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blksize > 0 {
			block = int64(st.Blksize)
		}
	}
	return punchAligned(f, off, n, block, func(off, n int64) error { return fpunchhole(f, off, n) }, punchUnsupported)
}

// fpunchholeT is sys/fcntl.h's fpunchhole_t, F_PUNCHHOLE's argument.
type fpunchholeT struct {
	flags    uint32 // fp_flags, unused
	reserved uint32
	offset   int64 // fp_offset
	length   int64 // fp_length
}

// x/sys has no fpunchhole_t, but unix.Fstore_t (F_PREALLOCATE's
// argument) begins with the same fields at the same offsets, and
// FcntlFstore passes a typed pointer through libc's fcntl: the kernel
// reads the first sizeof(fpunchhole_t) bytes. A constant index out of
// range fails the build if the layouts ever differ.
var (
	_ = [1]struct{}{}[unsafe.Offsetof(unix.Fstore_t{}.Offset)^unsafe.Offsetof(fpunchholeT{}.offset)]
	_ = [1]struct{}{}[unsafe.Offsetof(unix.Fstore_t{}.Length)^unsafe.Offsetof(fpunchholeT{}.length)]
	_ = [1]struct{}{}[unsafe.Sizeof(unix.Fstore_t{}.Flags)^unsafe.Sizeof(fpunchholeT{}.flags)]
)

// fpunchhole is fcntl(F_PUNCHHOLE) over [off, off+n), block-aligned.
func fpunchhole(f *os.File, off, n int64) error {
	arg := unix.Fstore_t{Offset: off, Length: n}
	for {
		err := unix.FcntlFstore(f.Fd(), unix.F_PUNCHHOLE, &arg)
		if err != unix.EINTR {
			return err
		}
	}
}
