package store

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/mlx"
)

// A whole-layout snapshot (.mlxkv) is chunked from its content: its header
// every C bytes, then each tensor row from the row's start every C bytes
// (snapshotRegions). Its commit used to read and hash all of it at fsync
// or close: 0.17 s of a 256 MiB snapshot's commit on two cores (issue 9,
// "whole-layout snapshot" and "cp"). An engine, and cp, write a snapshot
// in order from its start, and its header comes first: a PiecePlan made
// from the header tells the writer where those chunks will be, so that it
// can hash each as soon as it is written, beside the writes, and give the
// sums to the commit (Changes.Pieces). The sums only ever spare a hash:
// the commit plans again from the final content and takes a sum only for
// a chunk at the same offset and of the same length.

// minPiece is the shortest row a PiecePlan hashes while written: a tensor
// of shorter rows (a few tokens) is left to the commit, so that a
// degenerate header cannot make the writer plan a piece per few bytes.
const minPiece = 4 << 10

// piecePlanSize is the file size a header is parsed against while the
// file is written: any extent the header declares fits; a PiecePlan only
// ever yields pieces that were written.
const piecePlanSize = 1 << 62

// PiecePlan yields the chunks of a snapshot's plan in file order, as far
// as it is written. A row of a snapshot with a parent (the committed
// snapshot of the longest common token prefix) is cut first where the
// parent's row was, then every C bytes, as the commit cuts it when the
// parent's chunks match, which they do for the rows of a shared prefix.
// Not safe for concurrent use.
type PiecePlan struct {
	c         int64
	segment   int64 // a file cut by content: the segments' size (cdcpieces.go)
	headerEnd int64
	slots     []planSlot // by offset, rows of at least minPiece bytes
	parent    *parentSnap
	i         int           // the slot of the cursor; -1: the header
	row       int64         // the row of the cursor in slot i
	pos       int64         // the cursor within the header or the row
	cuts      []parentChunk // the row's first chunks: its parent's
	cut       int           // the next of cuts
	// expect is the parent's chunk where the piece Next returned last
	// was cut (Parent).
	expect   blockstore.ID
	expected bool
	// grow, for a file whose rows are found as it is written (a
	// llama.cpp state file's, llamapieces.go), appends the slots whose
	// headers lie below upto; nil once there are no more.
	grow func(p *PiecePlan, upto int64)
}

// planSlot is a tensor's rows, and its index among the snapshot's
// tensors (the parent's rows are found by it).
type planSlot struct {
	slotRows
	idx int
}

// ErrMorePieces: the first n bytes of a snapshot do not hold its whole
// header yet (SnapshotPieces).
var ErrMorePieces = errors.New("header not written yet")

// SnapshotPieces makes the PiecePlan of a whole-layout snapshot from its
// first n bytes (src), which must hold its prefix and header; it returns
// ErrMorePieces if they do not yet. Any other error says the file is not
// a whole-layout snapshot that the store would chunk by rows (a format-5
// manifest, a header over the caps, or no snapshot at all): its commit
// hashes it as it does now. The header is checked as the commit checks
// it.
func (s *Store) SnapshotPieces(src io.ReaderAt, n int64) (*PiecePlan, error) {
	if n < mlx.PrefixLen {
		return nil, ErrMorePieces
	}
	var pb [mlx.PrefixLen]byte
	if _, err := src.ReadAt(pb[:], 0); err != nil {
		return nil, fmt.Errorf("read prefix: %w", err)
	}
	var p mlx.Prefix
	if err := p.UnmarshalBinary(pb[:]); err != nil {
		return nil, err
	}
	if err := s.caps.checkHeaderLen(src); err != nil {
		return nil, err // refused before all of it is written
	}
	if n < mlx.PrefixLen+int64(p.HeaderLen) {
		return nil, ErrMorePieces
	}
	snap, err := s.parseSnapshot(src, piecePlanSize, "")
	if err != nil {
		return nil, err
	}
	if snap.Blocks() {
		return nil, errors.New("a format-5 manifest is not chunked by rows")
	}
	plan := &PiecePlan{c: s.chunkSize, headerEnd: mlx.PrefixLen + int64(p.HeaderLen), i: -1,
		parent: s.findParent(layoutKey(snap), snap.Header.Tokens, snapshotRows)}
	for i, sl := range rowsOf(snap) {
		if sl.rows > 0 && sl.rowBytes >= minPiece {
			plan.slots = append(plan.slots, planSlot{sl, i})
		}
	}
	slices.SortFunc(plan.slots, func(a, b planSlot) int { return cmp.Compare(a.off, b.off) })
	return plan, nil
}

// enterRow moves the cursor to the start of row row of slot i, and finds
// the parent's chunks of that row.
func (p *PiecePlan) enterRow(i int, row int64) {
	p.i, p.row, p.pos, p.cuts, p.cut = i, row, 0, p.cuts[:0], 0
	if p.parent == nil || i >= len(p.slots) {
		return
	}
	for _, pc := range p.parent.row(p.slots[i].idx, row, p.slots[i].rowBytes) {
		p.cuts = append(p.cuts, pc)
	}
}

// Parent returns the parent's chunk that the piece Next returned last was
// cut as, if it was: a piece whose sum is that chunk's is stored, which
// the writer need not ask the index (a transposed V's channel runs are
// all the parent's chunks but the new tail of each).
func (p *PiecePlan) Parent() (blockstore.ID, bool) { return p.expect, p.expected }

// Next returns the next chunk of the plan, [off, off+n), if it ends at or
// below upto (the bytes written so far), and moves past it; ok is false
// if it does not, or if the plan is done.
func (p *PiecePlan) Next(upto int64) (off, n int64, ok bool) {
	if p.segment > 0 {
		if p.pos+p.segment > upto {
			return 0, 0, false
		}
		p.pos += p.segment
		return p.pos - p.segment, p.segment, true
	}
	for {
		var start, length int64
		switch {
		case p.i < 0:
			start, length = 0, p.headerEnd
		case p.i < len(p.slots):
			sl := p.slots[p.i]
			start, length = sl.off+p.row*sl.rowBytes, sl.rowBytes
		case p.grow != nil:
			n := len(p.slots)
			if p.grow(p, upto); len(p.slots) == n {
				return 0, 0, false
			}
			p.enterRow(p.i, 0) // its parent's chunks: the slot is new
			continue
		default:
			return 0, 0, false
		}
		if p.pos >= length { // on to the next row, or slot
			switch {
			case p.i < 0:
				p.enterRow(0, 0)
			case p.row+1 < p.slots[p.i].rows:
				p.enterRow(p.i, p.row+1)
			default:
				p.enterRow(p.i+1, 0)
			}
			continue
		}
		n = min(p.c, length-p.pos)
		p.expected = p.cut < len(p.cuts)
		if p.expected {
			n, p.expect = p.cuts[p.cut].n, p.cuts[p.cut].id
		}
		off = start + p.pos
		if off+n > upto {
			return 0, 0, false
		}
		p.pos += n
		p.cut++
		return off, n, true
	}
}
