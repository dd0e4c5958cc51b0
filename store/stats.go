package store

import (
	"fmt"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Stats summarises a store.
type Stats struct {
	Files        int64   `json:"files"`
	Dirs         int64   `json:"dirs"`
	LogicalBytes int64   `json:"logicalBytes"` // sum of file sizes
	ZeroBytes    int64   `json:"zeroBytes"`    // of which zero runs (holes), stored as nothing
	StoredBytes  int64   `json:"storedBytes"`  // bytes of live chunks
	DedupRatio   float64 `json:"dedupRatio"`   // logical / stored
	Chunks       int64   `json:"chunks"`
	Packs        int64   `json:"packs"`
	PackBytes    int64   `json:"packBytes"` // committed pack bytes, live and dead
	DeadBytes    int64   `json:"deadBytes"` // committed pack bytes no chunk uses (released chunks; failed or in-flight commits' ranges; page padding)
	ChunkSize    int64   `json:"chunkSize"`
	Orphans      int64   `json:"orphans"`
	// Capacity is the store's setting (0: unlimited), Evictions what
	// eviction removed since the store was opened (evict.go).
	Capacity  int64          `json:"capacity"`
	Evictions EvictionCounts `json:"evictions"`
	// Compactions is what compaction did since the store was opened
	// (compactstats.go).
	Compactions CompactionCounts `json:"compactions"`
	// Match counts prefix lookups since the store was opened (match.go).
	Match MatchStats `json:"match"`
}

// Stats reads the store's totals in one transaction.
func (s *Store) Stats() (*Stats, error) {
	st := &Stats{ChunkSize: s.chunkSize, Capacity: s.Settings().Capacity, Evictions: s.EvictionCounts(), Compactions: s.CompactionCounts(), Match: s.MatchStats()}
	err := s.db.View(func(tx *manifest.Tx) error {
		err := tx.ForEachInode(func(n *manifest.Inode) error {
			if n.IsDir() {
				st.Dirs++
				return nil
			}
			st.Files++
			st.LogicalBytes += n.Size
			m, err := tx.Manifest(n.Ino)
			if err != nil {
				return err
			}
			for _, e := range m {
				if e.Zero {
					st.ZeroBytes += e.Len
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.ForEachChunk(func(_ blockstore.ID, c manifest.Chunk) error {
			st.Chunks++
			st.StoredBytes += c.Loc.Len
			return nil
		})
		if err != nil {
			return err
		}
		packs, err := tx.Packs()
		for _, p := range packs {
			st.Packs++
			st.PackBytes += p.Committed
			st.DeadBytes += p.Dead
		}
		orphans, _ := tx.Orphans()
		st.Orphans = int64(len(orphans))
		st.Files -= st.Orphans
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("stats %s: %w", s.dir, err)
	}
	if st.StoredBytes > 0 {
		st.DedupRatio = float64(st.LogicalBytes) / float64(st.StoredBytes)
	}
	return st, nil
}
