//go:build !linux

package store

import "io"

type mapping struct {
	data  []byte
	close func()
}

func mapSource(src io.ReaderAt, off, n int64) (mapping, bool) { return mapping{}, false }
