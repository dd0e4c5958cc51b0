//go:build !linux

package journal

import "os"

func fdatasync(f *os.File) error { return f.Sync() }

func fallocate(*os.File, int64, int64) error { return nil }
