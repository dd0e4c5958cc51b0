//go:build !linux

package blockstore

import "os"

func copyRange(src *os.File, srcOff int64, dst *os.File, dstOff, n int64) error {
	return copyUser(src, srcOff, dst, dstOff, n)
}

func startWriteback(f *os.File, off, n int64) {}

func adviseSequential(f *os.File) {}
