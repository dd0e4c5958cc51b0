package main

import (
	"fmt"
	"io"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/store"
)

// evictToCapacity applies the store's capacity in an offline command (kvfs
// put, kvfs gc on an unmounted store), as a mounted store's daemon does
// after each commit: if stored bytes exceed the capacity, it evicts with
// the daemon's code (gc.Evict: the retention policy's order, down to the
// low-water mark, never a pinned or open file). keep, if not nil, is the
// file just put: it is held as an open file is, so that it is not the
// file evicted. What was evicted is said to out; a store still over its
// capacity afterwards (what is left is pinned, or the file just put) is
// said to warn.
func evictToCapacity(s *store.Store, keep *store.FileInfo, out, warn io.Writer) error {
	capacity := s.Settings().Capacity
	if capacity <= 0 {
		return nil
	}
	if keep != nil {
		if err := s.Hold(keep.Ino); err != nil {
			return fmt.Errorf("apply the capacity of %s: %w", s.Dir(), err)
		}
		defer s.Unhold(keep.Ino)
	}
	evicted, err := gc.Evict(s)
	stored, serr := s.LiveBytes()
	if len(evicted) > 0 {
		var n int64
		for _, e := range evicted {
			n += e.Bytes
		}
		fmt.Fprintf(out, "%s: evicted %d file(s) (%s) to keep it under its capacity: stored %s, capacity %s\n",
			s.Dir(), len(evicted), formatBytes(n), formatBytes(stored), formatBytes(capacity))
	}
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("apply the capacity of %s: %w", s.Dir(), err)
	}
	if stored <= capacity {
		return nil
	}
	why := "what is left is pinned"
	if keep != nil {
		why = "what is left is pinned, or " + displayName(keep.Path) + ", just put, which is kept"
		if u, err := s.Usage(keep.Ino); err == nil && u.Stored > capacity {
			why = fmt.Sprintf("%s alone stores %s, larger than the capacity; it is kept", displayName(keep.Path), formatBytes(u.Stored))
		}
	}
	fmt.Fprintf(warn, "kvfs: %s is still over its capacity (stored %s, capacity %s): %s\n", s.Dir(), formatBytes(stored), formatBytes(capacity), why)
	return nil
}
