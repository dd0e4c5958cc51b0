package gc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvfs/kvfs/store"
)

// Evict keeps s under its capacity: when stored bytes exceed it, it
// removes files in the retention policy's order (Plan) until stored bytes
// are under the low-water mark or nothing more may go, and returns what it
// removed. A pass chooses from the store as it is; the bytes a file frees
// are estimated at that moment (its unshared chunks), and evicting one file
// may leave another's chunks unshared, so passes repeat until under.
func Evict(s *store.Store) ([]store.Evicted, error) {
	var out []store.Evicted
	if st := s.Settings(); st.Capacity <= 0 {
		return nil, nil
	} else if n, err := s.LiveBytes(); err != nil || n <= st.Capacity {
		return nil, err // the common case: the candidate table's count
	}
	for pass := 0; pass < 64; pass++ {
		st := s.Settings()
		if st.Capacity <= 0 {
			return out, nil
		}
		if err := s.FlushUses(); err != nil {
			return out, err
		}
		victims, done, err := decide(s, st, pass)
		if err != nil {
			return out, fmt.Errorf("evict %s: %w", s.Dir(), err)
		}
		if done || len(victims) == 0 {
			return out, nil
		}
		got, err := s.EvictVictims(victims, st.Retention)
		out = append(out, got...)
		if err != nil || len(got) == 0 {
			return out, err
		}
	}
	return out, nil
}

// decide is one pass's choice, from the store's candidate table
// (store.ChooseFromTable, PlanBounded): what to evict, or done when stored
// bytes are under what the pass aims at.
func decide(s *store.Store, st store.Settings, pass int) ([]store.Victim, bool, error) {
	t0 := time.Now()
	var victims []store.Victim
	done := false
	err := s.ChooseFromTable(func(c store.TableChoice) error {
		if pass == 0 && c.Stored <= st.Capacity {
			done = true
			return nil
		}
		low := st.Capacity / 100 * int64(st.LowWater)
		if c.Stored <= low {
			done = true
			return nil
		}
		v, age, err := PlanBounded(st.Retention, c.Cands, c.Stored-low, s.RetentionAge(), c.Exact)
		if err != nil {
			return err
		}
		s.NoteDecision(age, time.Since(t0))
		victims = v
		return nil
	})
	return victims, done, err
}

// Evictor runs Evict in the daemon, off the FUSE request path: when a
// commit or a settings change wakes it (store.KickEviction), and every
// interval, which also writes the counted uses to the index. It returns
// when ctx is done.
func Evictor(ctx context.Context, s *store.Store, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	const minGap = 100 * time.Millisecond
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.EvictionKicks():
		case <-t.C:
		}
		if s.Closed() {
			return
		}
		// Commits kick it after each one: a pass at most every
		// minGap, so that a stream of commits does not keep it
		// walking the index.
		if wait := minGap - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if _, err := Evict(s); err != nil {
			log.Warn("eviction", "err", err)
		}
		if err := s.FlushUses(); err != nil {
			log.Warn("eviction", "err", err)
		}
	}
}
