package journal

import (
	"os"
	"syscall"
)

// fdatasync flushes the file's data, and of its metadata only what is
// needed to read the data back: for a preallocated, already written
// segment, nothing.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

func fallocate(f *os.File, off, n int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, off, n)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EOPNOTSUPP, syscall.ENOSYS:
			return nil // the zeros written next allocate the blocks anyway
		}
		return err
	}
}
