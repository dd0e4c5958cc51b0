package store

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/kvfs/kvfs/manifest"
)

// Access tracking for retention. Reads are counted in memory (noteUse) and
// written to the inode records in one transaction now and then (flushUses:
// by the evictor's timer, before each eviction pass and at close), so that
// a read costs no index write and the LRU order survives a restart. A
// crash loses the uses since the last flush: the order then falls back on
// the times flushed before, and on the modification time of files never
// used (manifest.Inode.AccessTime).

// retainState is the store's capacity, retention and eviction state.
type retainState struct {
	mu       sync.Mutex
	settings Settings
	uses     map[uint64]*useNote // since the last flush
	// age is the GreedyDual age (gc.Plan): the priority of the last file
	// evicted under cost-size, the base a file used now starts from.
	age float64

	kick chan struct{} // wakes the evictor (KickEviction)

	counts  EvictionCounts
	onEvict func(Evicted)
	// minAge spares files changed more recently (SetEvictMinAge).
	minAge time.Duration

	table candTable // the eviction candidates (candtable.go)
}

// useNote is what noteUse gathered about one inode since the last flush.
type useNote struct {
	last int64   // ns since the epoch
	n    uint64  // uses
	age  float64 // the GreedyDual age at the last use
}

// noteUse counts a use of inode ino: an open for reading, or a change of
// its times (the engine touches a snapshot it restores).
func (s *Store) noteUse(ino uint64) {
	now := time.Now().UnixNano()
	r := &s.retain
	r.mu.Lock()
	if r.uses == nil {
		r.uses = map[uint64]*useNote{}
	}
	u := r.uses[ino]
	if u == nil {
		u = &useNote{}
		r.uses[ino] = u
	}
	u.last, u.age = now, r.age
	u.n++
	r.mu.Unlock()
}

// pendingUse returns the uses of ino not yet flushed, if any.
func (r *retainState) pendingUse(ino uint64) (useNote, bool) {
	u := r.uses[ino]
	if u == nil {
		return useNote{}, false
	}
	return *u, true
}

// ageKey is where the GreedyDual age is kept (a setting kvfs config does
// not show).
const ageKey = "retention_age"

// flushUses writes the uses gathered in memory into the inode records,
// and the GreedyDual age, in one transaction.
func (s *Store) flushUses() error {
	r := &s.retain
	r.mu.Lock()
	uses, age := r.uses, r.age
	r.uses = nil
	r.mu.Unlock()
	if len(uses) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *manifest.Tx) error {
		for ino, u := range uses {
			n, err := tx.Inode(ino)
			if err != nil {
				continue // removed meanwhile
			}
			n.LastUse = max(n.LastUse, u.last)
			n.Uses += u.n
			n.UseAge = math.Float64bits(u.age)
			if err := tx.PutInode(n); err != nil {
				return err
			}
		}
		return tx.PutSetting(ageKey, strconv.FormatFloat(age, 'g', -1, 64))
	})
	if err != nil {
		// Put them back, so that a later flush writes them.
		r.mu.Lock()
		if r.uses == nil {
			r.uses = map[uint64]*useNote{}
		}
		for ino, u := range uses {
			if v := r.uses[ino]; v != nil {
				v.n += u.n
			} else {
				r.uses[ino] = u
			}
		}
		r.mu.Unlock()
	}
	return err
}

// loadAge reads the GreedyDual age at open.
func (s *Store) loadAge() {
	s.db.View(func(tx *manifest.Tx) error {
		if v, ok := tx.Setting(ageKey); ok {
			if a, err := strconv.ParseFloat(v, 64); err == nil {
				s.retain.age = a
			}
		}
		return nil
	})
}
