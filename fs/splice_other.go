//go:build !linux

package fs

import (
	"log/slog"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// spliceResult: macFUSE has no splice; reads are copied.
func spliceResult(segs []store.Segment, total int) fuse.ReadResult { return nil }

func raisePipeLimit(want int, log *slog.Logger) bool { return false }
