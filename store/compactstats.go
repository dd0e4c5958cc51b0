package store

import "sync"

// CompactionCounts add up what compactions (background and kvfs gc) did
// since the store was opened, for /.kvfs/stats and the metrics: whether
// compaction keeps up with removals and how much disk it gives back.
type CompactionCounts struct {
	Runs           int64 `json:"runs"`           // compactions finished (dry runs not counted)
	PacksRewritten int64 `json:"packsRewritten"` // packs whose live chunks were copied out
	PacksDeleted   int64 `json:"packsDeleted"`   // pack files removed (rewritten or with nothing live)
	BytesCopied    int64 `json:"bytesCopied"`    // live chunk bytes copied
	BytesReclaimed int64 `json:"bytesReclaimed"` // disk space of the pack files given back
}

// compactCounter is the store's CompactionCounts.
type compactCounter struct {
	mu sync.Mutex
	c  CompactionCounts
}

// count adds a compaction's result, also one that failed part way (what
// it removed is gone either way).
func (k *compactCounter) count(res *CompactResult) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.Runs++
	k.c.PacksRewritten += int64(res.PacksRewritten)
	k.c.PacksDeleted += int64(res.PacksDeleted)
	k.c.BytesCopied += res.BytesCopied
	k.c.BytesReclaimed += max(res.BytesReclaimed, 0)
}

// CompactionCounts returns what compaction did since Open.
func (s *Store) CompactionCounts() CompactionCounts {
	s.compactions.mu.Lock()
	defer s.compactions.mu.Unlock()
	return s.compactions.c
}
