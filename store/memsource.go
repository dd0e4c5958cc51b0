package store

import "io"

// memSource is a commit's source held in memory (Changes.Mem): bytes past
// its end read as zeros, as a sparse spool file's holes do, up to the
// commit's size. A commit reads its batches as slices of it, not copies
// (readBatches), writes new chunks into packs from them, and takes the
// bytes of its journal data records from it (journalBytes), not from the
// pack it just wrote: a small file's commit then makes no read system
// call at all.
type memSource []byte

// ReadAt reads len(p) bytes at off, zeros past the end of m.
func (m memSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := 0
	if off < int64(len(m)) {
		n = copy(p, m[off:])
	}
	clear(p[n:])
	return len(p), nil
}

// slice returns [off, off+n) of m without copying, when m holds all of it.
func (m memSource) slice(off, n int64) ([]byte, bool) {
	if off < 0 || off+n > int64(len(m)) {
		return nil, false
	}
	return m[off : off+n : off+n], true
}
