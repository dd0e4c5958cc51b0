package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/kvfs/kvfs/store"
)

// startCompactor compacts s every interval in the background (store.Compact
// with threshold), logging what each run reclaimed, until stop is called;
// stop waits for a run in progress to give up. An interval of 0 starts
// nothing.
func startCompactor(s *store.Store, interval time.Duration, threshold float64, log *slog.Logger) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			res, err := s.Compact(ctx, store.CompactOptions{Threshold: threshold})
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				log.Warn("background compaction", "err", err)
			case res.PacksDeleted > 0 || res.PacksRewritten > 0:
				log.Info("compacted", "packs_rewritten", res.PacksRewritten, "packs_removed", res.PacksDeleted,
					"bytes_copied", res.BytesCopied, "bytes_reclaimed", res.BytesReclaimed, "packs_skipped", res.PacksSkipped)
			}
		}
	}()
	return func() { cancel(); <-done }
}
