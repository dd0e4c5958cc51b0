package blockstore

import (
	"os"
	"syscall"
)

const (
	fallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	fallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE
)

func punchHole(f *os.File, off, n int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, off, n)
		if err != syscall.EINTR {
			return err
		}
	}
}
