//go:build !linux

package fs

import "os"

// startWriteback: no early writeback where sync_file_range is missing;
// the commit's fsync writes everything.
func startWriteback(f *os.File, off, n int64) {}
