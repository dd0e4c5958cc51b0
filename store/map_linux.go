package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

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

// faultCause tells apart why reading a mapped source faulted: a source
// that shrank under its mapping (errSourceChanged, as guardFault says),
// or pages that could not be read in. A tmpfs allocates a page to read a
// hole of a file through a mapping, and faults when it has no room: a
// sparse spool committed on a full tmpfs store failed with EIO and
// "source file changed (truncated)", though nothing had changed (red
// team, issue 29). The answer is ENOSPC when the source's filesystem has
// less room than the batch a mapping reads, EIO otherwise.
func (in *ingest) faultCause(err error) error {
	f, ok := in.src.(*os.File)
	if !ok || !errors.Is(err, errSourceChanged) {
		return err
	}
	fi, serr := f.Stat()
	if serr != nil || fi.Size() < in.size {
		return err // it did shrink
	}
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) == nil && st.Bavail*uint64(st.Bsize) < batchBytes {
		return fmt.Errorf("read %s through its mapping: %w (its filesystem needs room to read a hole, as a tmpfs does)", f.Name(), syscall.ENOSPC)
	}
	return fmt.Errorf("read %s through its mapping: %w", f.Name(), syscall.EIO)
}
