package store

import (
	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// chunkReader is what reading files needs from the chunk layer: bytes by
// location. blockstore.Dir implements it for local packs; a cache in front
// of an object store can implement it for a shared pool.
//
// Contract: ReadAt fills all of p from the chunk at loc, starting off bytes
// into it, or returns an error (a pack that does not exist is an error
// satisfying errors.Is(err, fs.ErrNotExist)); it never returns a short
// read without an error. ReadChunk reads a whole chunk into p and, with
// verify, returns an error wrapping blockstore.ErrCorrupt instead of bytes
// that do not hash to id. Neither keeps p. Both are safe for concurrent
// use. Whoever opened the reader closes it; readers never close it.
type chunkReader interface {
	ReadAt(p []byte, loc blockstore.Loc, off int64) (int, error)
	ReadChunk(p []byte, id blockstore.ID, loc blockstore.Loc, verify bool) error
}

var _ chunkReader = (*blockstore.Dir)(nil)

// HasChunk reports whether the index holds chunk id now. A writer asks it
// of the chunks it hashes as they are written (fs's spool): the bytes of
// one that is stored need not reach the disk before the commit, which
// decides again in its own transaction.
func (s *Store) HasChunk(id blockstore.ID) bool {
	return s.HasChunks([]blockstore.ID{id})[0]
}

// HasChunks is HasChunk of each of ids, in one read of the index: a
// writer's hashers ask of every few pieces they hash (a transposed V's
// channel runs are chunks of a few KiB).
func (s *Store) HasChunks(ids []blockstore.ID) []bool {
	out := make([]bool, len(ids))
	if len(ids) == 0 {
		return out
	}
	s.db.View(func(tx *manifest.Tx) error {
		for i, id := range ids {
			_, err := tx.Chunk(id)
			out[i] = err == nil
		}
		return nil
	})
	return out
}
