//go:build !linux && !darwin

package blockstore

import "os"

// punchHole zeroes the range where the platform has no hole punching
// wired up here: the space is reclaimed by compaction, or when the pack
// is removed.
func punchHole(f *os.File, off, n int64) error { return zeroRange(f, off, n) }
