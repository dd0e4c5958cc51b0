package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Eviction keeps the store under its capacity (Settings): when stored
// bytes exceed it, whole files are removed, in the retention policy's
// order (gc.Plan), until stored bytes are under the low-water mark. Never
// removed: a file open or mmapped through the mount (an mmap holds the
// FUSE file open until munmap, so it is in Store.open), a file pinned by
// the user (PinXattr), an engine block that a committed format-5 manifest
// lists (blobs.go: the manifest is evicted, its blocks follow once no
// manifest lists them), a block younger than the blob grace period
// (the engine writes a snapshot's blocks before its manifest), and a block
// that a client saw exist within the grace period (seen.go: the engine
// skips a block that exists and lists it in the manifest it commits last).

// PinXattr is the attribute that pins a file: `kvfs pin`, or setxattr
// through the mount. It is stored with the file's other attributes, so a
// commit of new content keeps it. (Not to be confused with blob pins,
// which are a manifest's references to its blocks.)
const PinXattr = "user.kvfs.pin"

// EvictionCounts are the evictor's totals since the store was opened.
type EvictionCounts struct {
	Passes       int64 `json:"passes"`         // passes that evicted something
	Files        int64 `json:"files"`          // files evicted
	Bytes        int64 `json:"bytes"`          // stored bytes they freed (as planned)
	LRU          int64 `json:"lru"`            // files evicted under lru
	CostSize     int64 `json:"costSize"`       // files evicted under cost-size
	Skipped      int64 `json:"skipped"`        // victims found open, pinned or changed at removal
	LastDecision int64 `json:"lastDecisionNs"` // ns the last pass took to choose (gather and plan)
}

// Evicted is one file an eviction pass removed.
type Evicted struct {
	Path   string
	Ino    uint64
	Bytes  int64
	Reason string
}

// EvictionCounts returns the evictor's totals.
func (s *Store) EvictionCounts() EvictionCounts {
	s.retain.mu.Lock()
	defer s.retain.mu.Unlock()
	return s.retain.counts
}

// StoredBytes is the bytes of live chunks (Stats.StoredBytes), read with
// one walk of the chunks and nothing else: the evictor's check of whether
// anything is to do.
func (s *Store) StoredBytes() (int64, error) {
	var n int64
	err := s.db.View(func(tx *manifest.Tx) error {
		return tx.ForEachChunk(func(_ blockstore.ID, c manifest.Chunk) error {
			n += c.Loc.Len
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("stored bytes %s: %w", s.dir, err)
	}
	return n, nil
}

// Candidate is a file that may be evicted: idle (not open, not mmapped),
// not pinned, and not an engine block a manifest lists.
type Candidate struct {
	Ino     uint64
	LastUse int64  // ns since the epoch: last open for reading, or the engine's utimes
	Uses    uint64 // opens for reading and utimes bumps
	// Cost is what keeping the file saves: the tokens of a snapshot (the
	// .mlxkv header's token count), 1 for any other file.
	Cost float64
	// Bytes is what evicting the file frees: its chunks no other file
	// lists (not its logical size: dedup makes most of a prefix-growth
	// series shared).
	Bytes int64
	// Base is the GreedyDual age the store had at the file's last use
	// (cost-size only; 0 if never used since it was written).
	Base float64
}

// Victim is a candidate chosen for eviction, with why.
type Victim struct {
	Candidate
	Priority float64 // cost-size: the GreedyDual priority it went with
	Reason   string
}

// Candidates returns the files eviction may remove, with what each would
// free, and the store's stored bytes, by a walk of the index: what the
// candidate table (ChooseFromTable, which gc.Evict uses) must agree with,
// at the cost of the whole index per call.
func (s *Store) Candidates() ([]Candidate, int64, error) {
	var cands []Candidate
	var stored int64
	err := s.db.View(func(tx *manifest.Tx) error {
		var err error
		cands, stored, err = s.candidates(tx)
		return err
	})
	return cands, stored, err
}

func (s *Store) candidates(tx *manifest.Tx) ([]Candidate, int64, error) {
	// One walk of the chunks gives the stored bytes and each chunk's
	// references, cheaper than a lookup per chunk of each manifest.
	chunks := map[blockstore.ID]chunkUse{}
	var stored int64
	err := tx.ForEachChunk(func(id blockstore.ID, c manifest.Chunk) error {
		stored += c.Loc.Len
		chunks[id] = chunkUse{c.Refs, c.Loc.Len}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	open := make(map[uint64]bool, len(s.open))
	for ino, n := range s.open {
		open[ino] = n > 0
	}
	s.mu.Unlock()
	s.retain.mu.Lock()
	pending := make(map[uint64]useNote, len(s.retain.uses))
	for ino, u := range s.retain.uses {
		pending[ino] = *u
	}
	s.retain.mu.Unlock()
	pinned, err := pinnedInos(tx)
	if err != nil {
		return nil, 0, err
	}
	tokens := tokenCounts(tx)
	now := time.Now()
	young := now.Add(-s.blobGrace).UnixNano()
	fresh := s.freshSince(now)
	var cands []Candidate
	err = tx.ForEachInode(func(n *manifest.Inode) error {
		if open[n.Ino] || pinned[n.Ino] || n.Ctime > fresh {
			return nil
		}
		if n.Blob != "" && (n.Ctime > young || s.seenNow(n.Blob, now.UnixNano())) {
			return nil // its manifest may be on its way
		}
		e, exact, err := candEntryOf(tx, n, chunksIn(chunks), tokens)
		if err != nil || e == nil {
			return err
		}
		c := Candidate{Ino: n.Ino, LastUse: e.lastUse, Uses: e.uses, Base: e.base, Cost: e.cost, Bytes: exact}
		if u, ok := pending[n.Ino]; ok {
			c.LastUse, c.Uses, c.Base = max(c.LastUse, u.last), c.Uses+u.n, u.age
		}
		cands = append(cands, c)
		return nil
	})
	return cands, stored, err
}

// RetentionAge is the GreedyDual age (gc.Plan), the base of a file used
// now.
func (s *Store) RetentionAge() float64 {
	s.retain.mu.Lock()
	defer s.retain.mu.Unlock()
	return s.retain.age
}

// NoteDecision records an eviction pass's choice: the GreedyDual age
// after it, and how long choosing took (EvictionCounts.LastDecision).
func (s *Store) NoteDecision(age float64, took time.Duration) {
	s.retain.mu.Lock()
	s.retain.age = max(s.retain.age, age)
	s.retain.counts.LastDecision = took.Nanoseconds()
	s.retain.mu.Unlock()
}

// FlushUses writes the uses counted in memory to the index (recency.go).
func (s *Store) FlushUses() error {
	if err := s.flushUses(); err != nil {
		return fmt.Errorf("flush uses %s: %w", s.dir, err)
	}
	return nil
}

// SetEvictMinAge makes eviction pass over every file changed (written,
// committed, renamed) within d: a writer's temporary file between its
// fsync and its rename onto the real name (the engine's atomic writes,
// FORMAT.md §4.3 and §4.4) is idle and may be the cheapest to evict, and
// removing it fails the rename that would have saved the snapshot. 0, the
// default, spares nothing (offline commands; the daemon sets its
// --evict-min-age).
func (s *Store) SetEvictMinAge(d time.Duration) {
	s.retain.mu.Lock()
	s.retain.minAge = d
	s.retain.mu.Unlock()
}

// freshSince is the ctime (ns) after which a file is too fresh to evict,
// at now: past now if eviction spares none.
func (s *Store) freshSince(now time.Time) int64 {
	s.retain.mu.Lock()
	d := s.retain.minAge
	s.retain.mu.Unlock()
	if d <= 0 {
		return now.UnixNano() + 1
	}
	return now.Add(-d).UnixNano()
}

// OnEvict sets a function called after each file eviction removed (the
// daemon drops the kernel's cached entry).
func (s *Store) OnEvict(fn func(Evicted)) {
	s.retain.mu.Lock()
	s.retain.onEvict = fn
	s.retain.mu.Unlock()
}

// KickEviction wakes the evictor (gc.Evictor), if one runs: after a commit
// that added bytes, after a change of settings. It never blocks.
func (s *Store) KickEviction() {
	select {
	case s.retain.kick <- struct{}{}:
	default:
	}
}

// EvictionKicks is what KickEviction wakes.
func (s *Store) EvictionKicks() <-chan struct{} { return s.retain.kick }

// evictBatch is how many files one transaction removes.
const evictBatch = 64

// EvictVictims removes victims, a batch a transaction, checking each
// again under the store's release lock (it may have been opened, pinned or
// replaced since it was chosen).
func (s *Store) EvictVictims(victims []Victim, policy string) ([]Evicted, error) {
	var out []Evicted
	for len(victims) > 0 {
		batch := victims[:min(len(victims), evictBatch)]
		victims = victims[len(batch):]
		var freed []blockstore.Loc
		var done []Evicted
		skipped := 0
		err := s.freeing("evict", func(tx *manifest.Tx) error {
			freed, done, skipped = nil, nil, 0
			for _, v := range batch {
				path, f, ok, err := s.evictTx(tx, v.Ino)
				if err != nil {
					return err
				}
				if !ok {
					skipped++
					continue
				}
				freed = append(freed, f...)
				done = append(done, Evicted{Path: path, Ino: v.Ino, Bytes: v.Bytes, Reason: v.Reason})
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("evict %s: %w", s.dir, err)
		}
		s.punch(freed)
		r := &s.retain
		r.mu.Lock()
		r.counts.Skipped += int64(skipped)
		if len(done) > 0 {
			r.counts.Passes++
		}
		for _, e := range done {
			r.counts.Files++
			r.counts.Bytes += e.Bytes
			if policy == RetentionCostSize {
				r.counts.CostSize++
			} else {
				r.counts.LRU++
			}
		}
		hook := r.onEvict
		r.mu.Unlock()
		for _, e := range done {
			s.log.Info("evicted", "path", e.Path, "ino", e.Ino, "bytes", e.Bytes, "reason", e.Reason)
			if hook != nil {
				hook(e)
			}
		}
		out = append(out, done...)
	}
	return out, nil
}

// evictTx removes inode ino by its name in tx, if it may still go.
func (s *Store) evictTx(tx *manifest.Tx, ino uint64) (string, []blockstore.Loc, bool, error) {
	n, err := tx.Inode(ino)
	if errors.Is(err, manifest.ErrNotFound) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	if n.IsDir() || n.Parent == 0 {
		return "", nil, false, nil
	}
	if at, err := tx.Lookup(n.Parent, n.Name); err != nil || at != ino {
		return "", nil, false, nil
	}
	s.mu.Lock()
	open := s.open[ino] > 0
	s.mu.Unlock()
	if open {
		return "", nil, false, nil
	}
	if _, err := tx.Xattr(ino, PinXattr); err == nil {
		return "", nil, false, nil
	}
	if n.Blob != "" {
		if r, err := tx.BlobRecord(n.Blob); err == nil && r.Pins > 0 {
			return "", nil, false, nil
		}
		// A client saw it exist since it was chosen: an engine that
		// skipped writing it commits a manifest that lists it (seen.go).
		if s.seenNow(n.Blob, time.Now().UnixNano()) {
			return "", nil, false, nil
		}
	}
	path := "/" + inoPath(tx, n)
	freed, err := s.removeTx(tx, n.Parent, n.Name, removeFile)
	if err != nil {
		return "", nil, false, err
	}
	if n.Blob != "" {
		// An evicted block has no grace: it was idle past it already.
		if r, err := tx.BlobRecord(n.Blob); err == nil && r.Pins == 0 && r.HasContent {
			if _, err := tx.Blob(n.Blob); err != nil {
				r.Grace = 1
				if err := tx.PutBlobRecord(n.Blob, r); err != nil {
					return "", nil, false, err
				}
				f, err := s.retire(tx, n.Blob, time.Now())
				if err != nil {
					return "", nil, false, err
				}
				freed = append(freed, f...)
			}
		}
	}
	return path, freed, true, nil
}
