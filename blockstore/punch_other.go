//go:build !linux

package blockstore

import "os"

// punchHole zeroes the range where the platform has no hole punching
// wired up here (macOS has F_PUNCHHOLE through fcntl; until it is used the
// space is reclaimed only when the pack is removed).
func punchHole(f *os.File, off, n int64) error {
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
