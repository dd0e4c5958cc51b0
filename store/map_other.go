//go:build !linux

package store

import "io"

type mapping struct {
	data  []byte
	close func()
}

func mapSource(src io.ReaderAt, off, n int64) (mapping, bool) { return mapping{}, false }

// faultCause: no source is mapped here, so a fault is never a source's.
func (in *ingest) faultCause(err error) error { return err }
