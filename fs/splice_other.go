//go:build !linux

package fs

import (
	"log/slog"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// spliceResult: macFUSE has no splice; reads are copied.
func spliceResult(segs *store.Segments, total int) fuse.ReadResult {
	segs.Release()
	return nil
}

// canSplice is false: macFUSE has no splice.
const canSplice = false

// PipeMaxSize is 0: macFUSE has no splice.
func PipeMaxSize() int { return 0 }

// RaisePipeLimit does nothing where there is no splice.
func RaisePipeLimit(log *slog.Logger) bool { return false }
