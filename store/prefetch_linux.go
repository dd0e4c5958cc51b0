package store

import "golang.org/x/sys/unix"

// Prefetch asks the kernel to read [off, off+n) of the file's packs into
// the page cache in the background (POSIX_FADV_WILLNEED), so that a
// sequential reader's next requests find their bytes there. It never
// waits for the disk and reports nothing: a prefetch that cannot be made
// (a verifying store, a range past the end, a pack gone) is skipped.
func (f *File) Prefetch(off, n int64) {
	if off >= f.size || n <= 0 {
		return
	}
	segs, ok := f.Segments(off, int(min(n, f.size-off)))
	if !ok {
		return
	}
	defer segs.Release()
	for _, s := range segs.List {
		if s.Fd != nil {
			unix.Fadvise(int(s.Fd.Fd()), s.Off, int64(s.Len), unix.FADV_WILLNEED)
		}
	}
}
