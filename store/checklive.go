package store

import (
	"context"
	"fmt"

	"github.com/kvfs/kvfs/manifest"
)

// liveProblems is Problems on a store in use. One look at a busy store
// sees, for a moment, states that are not faults: a pack an ingest is
// appending to is longer than its committed length, a pack just created
// is not yet in the index, a chunk released after the look's transaction
// is punched or its pack removed before its bytes are read. So a problem
// of the first look is reported only if a second look (without reading
// every chunk) finds it again, or, for a chunk whose bytes were wrong,
// if the chunk is still in the index at the same place: a chunk that
// stays live is never punched or moved in place (packs are append-only
// and compaction waits for the check), so its bytes were wrong when they
// were read. A real fault persists and is found; a passing state is not.
func (s *Store) liveProblems(ctx context.Context, opts CheckOptions) ([]Problem, error) {
	first, err := s.problems(ctx, opts)
	if err != nil || len(first) == 0 {
		return first, err
	}
	second, err := s.problems(ctx, CheckOptions{Live: true})
	if err != nil {
		return nil, err
	}
	again := make(map[string]bool, len(second))
	for _, p := range second {
		again[p.Msg] = true
	}
	var lost []Problem
	var out []Problem
	for _, p := range first {
		switch {
		case again[p.Msg]:
			out = append(out, p)
		case p.Kind == ProblemLost && p.Loc.Len > 0:
			lost = append(lost, p)
		}
	}
	if len(lost) == 0 {
		return out, nil
	}
	err = s.db.View(func(tx *manifest.Tx) error {
		for _, p := range lost {
			c, err := tx.Chunk(p.Chunk)
			if err == nil && c.Refs > 0 && c.Loc == p.Loc {
				out = append(out, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check %s: %w", s.dir, err)
	}
	return out, nil
}

// heldPacks returns the packs an appender holds or an adoption is making:
// in a live check their files may be longer than committed, or not yet
// in the index.
func (s *Store) heldPacks() map[uint32]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make(map[uint32]bool, len(s.held))
	for k, v := range s.held {
		if v {
			held[k] = true
		}
	}
	return held
}
