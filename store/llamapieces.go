package store

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvfs/kvfs/llamastate"
)

// A llama.cpp state file is written in order, its tokens and cells first,
// then each layer's K block and V block (llamastate), and its commit used
// to read and hash all of it at fsync or close: on the H200, saving an
// 8B-shaped file of 0.5–1.5 GiB took 1.4–1.7× a plain directory's time,
// against 0.8–1.1× for a whole-layout snapshot of the same bytes, hashed
// as it is written (issue 29). Its rows can be hashed as written too, but
// where they lie is known only block by block: each block's header gives
// its row size, and the next block starts where it ends. So the plan is
// made from the head (the tokens, the first stream's cells, its layer
// count and first K header), and grows a slot at a time as the writes
// pass each block's header (llamastate.Walk).
//
// A row's first chunks are its parent's, and the parent is the file of
// the same shape with the longest common token prefix: the shape (its
// layout key) is known only once the whole file is, but every key begins
// with what the head decides (llamastate.Head.KeyPrefix), so the plan
// takes the parent among the files whose key begins so. The commit finds
// the parent again from the whole file and takes a writer's sum only for
// a chunk of its own plan at the same offset and of the same length, so
// a parent or a block the writer got wrong costs hashing, never a byte.

// maxPlanHead bounds the head a writer's plan waits for: a file whose
// first block starts past it (millions of cells, or a hostile count) is
// hashed by its commit, so that no write parses a head of unbounded size.
const maxPlanHead = 64 << 20

// llamaPieces makes the PiecePlan of a llama.cpp state file from its first
// n bytes: ErrMorePieces until its head is written, an error for a file
// that the commit hashes whole (over the token cap, or a head that no
// state file has).
func (s *Store) llamaPieces(src io.ReaderAt, n int64) (*PiecePlan, error) {
	if err := s.caps.checkLlamaTokens(src); err != nil {
		return nil, err
	}
	h, err := llamastate.ParseHead(src, n)
	switch {
	case errors.Is(err, llamastate.ErrShort) && n < maxPlanHead:
		return nil, ErrMorePieces
	case errors.Is(err, llamastate.ErrShort):
		return nil, fmt.Errorf("llama.cpp state head past %d bytes", int64(maxPlanHead))
	case err != nil:
		return nil, err
	}
	w := h.Walk()
	plan := &PiecePlan{c: s.chunkSize, headerEnd: h.K0.Off, i: -1,
		parent: s.findParentUnder(h.KeyPrefix(), h.Tokens, llamaRows)}
	idx := 0       // the slot's index among all the file's (parentSnap.row)
	var rows int64 // the rows found so far, to the commit's cap
	plan.grow = func(p *PiecePlan, upto int64) {
		for {
			b, ok, err := w.Next(src, upto)
			if err != nil || w.Done() && !ok {
				p.grow = nil
			}
			if !ok {
				return
			}
			if rows += llamaSlot(b).rows; rows > maxPlanRows {
				// The commit cuts such a file by its content (checkRows):
				// its rows are not worth hashing.
				p.grow = nil
				return
			}
			// Rows as short as minRunBytes: their count is bounded by
			// the bytes written (llamaSlot), and the writer hashes
			// adjacent pieces together (fs.pieceHasher).
			if sl := llamaSlot(b); sl.rows > 0 && sl.rowBytes > 0 {
				p.slots = append(p.slots, planSlot{sl, idx})
			}
			idx++
		}
	}
	return plan, nil
}
