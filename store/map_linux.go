package store

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// mapping is a read-only view of part of a source file.
type mapping struct {
	data  []byte
	close func()
}

// mapSource maps [off, off+n) of src when src is a file: hashing then reads
// the page cache directly instead of copying it into a buffer first.
// MAP_POPULATE maps the window's pages up front, avoiding a fault per
// page. A file truncated under the mapping faults when touched; the hashing
// goroutines turn that fault into an error (see guardFault).
func mapSource(src io.ReaderAt, off, n int64) (mapping, bool) {
	f, ok := src.(*os.File)
	if !ok || n <= 0 {
		return mapping{}, false
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	data, err := unix.Mmap(int(f.Fd()), start, int(off-start+n), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return mapping{}, false
	}
	var once sync.Once
	return mapping{data: data[off-start:], close: func() { once.Do(func() { unix.Munmap(data) }) }}, true
}
