package blockstore

import (
	"io"
	"os"
)

// copyUser copies n bytes from src at srcOff to dst at dstOff through a
// buffer.
func copyUser(src *os.File, srcOff int64, dst *os.File, dstOff, n int64) error {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := src.ReadAt(buf[:k], srcOff); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if _, err := dst.WriteAt(buf[:k], dstOff); err != nil {
			return err
		}
		srcOff += k
		dstOff += k
		n -= k
	}
	return nil
}
