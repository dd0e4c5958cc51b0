//go:build !linux

package store

// Prefetch does nothing where there is no posix_fadvise.
func (f *File) Prefetch(off, n int64) {}
