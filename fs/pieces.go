package fs

import (
	"cmp"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
)

// pieceHasher hashes a new snapshot's chunks as they are written. A
// whole-layout snapshot is chunked by its tensor rows, not on the grid of
// cells, so its cells' sums are of no use to its commit, which used to
// read and hash the whole file at fsync or close (0.17 s of a 256 MiB
// snapshot's, on two cores). An engine, and cp, write a snapshot in order
// from its start, header first: once the header is written, the store's
// plan (store.PiecePlan) says where the chunks will be, and each is hashed
// on this goroutine as soon as the writes reach its end, beside them.
//
// The sums go to the commit (store.Changes.Pieces) only if the file was
// written in order: each write at or past the end of the ones before
// (inOrder), so that every byte below inOrder was written once or is a
// hole skipped over (cp skips a sparse source's), and no byte below it
// changed after it was hashed; no generation per range is needed. A write
// below inOrder, a truncation below it or a failed write drops them all,
// and the commit hashes as before; a truncation that only grows the file
// (cp of a file that ends in a hole) changes no byte below it. Its methods
// other than the goroutine's are called with the node's mu held.
type pieceHasher struct {
	plan    func(io.ReaderAt, int64) (*store.PiecePlan, error)
	p       *store.PiecePlan
	inOrder int64 // the end of the writes so far, in order; -1: not in order
	// first is the offset of the first write (-1 before it). The engine
	// writes a snapshot's tensors first, from the end of its header on,
	// and its header last (mlx.Writer: the header holds the tensors'
	// hashes): the hole [0, first) it skips is the header's, written in
	// order too (gapAt is how far) and before any piece is planned, which
	// only the header allows. Other writes below inOrder break the order.
	first, gapAt int64
	// planAt is how far the file must be written before the plan is
	// asked again, after it asked for more: twice as far, so that a
	// head parsed from the start (a llama.cpp file's cells) is parsed
	// a logarithmic number of times, whatever the writes' size.
	planAt int64
	// view is what the plan reads the file through: the write being
	// recorded, or the spool.
	view *writeView
	// group is pieces yielded but not yet queued: adjacent small ones
	// (a transposed V's channel runs, of a few KiB) go to a hasher
	// together, read in one pread.
	group pieceJob
	q     chan pieceJob
	done  *sync.WaitGroup // the spool's hashing
	// summed are the pieces hashed, in no order: appended by the
	// hashers under mu, read once the spool's hashing is done.
	mu     sync.Mutex
	summed []store.Piece
	read   func(buf []byte, off int64) bool
	// wroteNew, when set, is told of the pieces hashed, a job's at a
	// time, and of those known stored: their parent's chunks
	// (spool.wroteNewPieces).
	wroteNew func(pieces []store.Piece, stored []bool)
	C        int64
	// cut, for a plan of segments (a file cut by its content), cuts a
	// segment into the chunks to hash (Store.CutSegment); cutter is the
	// store's, set on the plan's goroutine before the hashers start.
	cut, cutter func(data []byte, off int64) []store.Piece
}

// pieceJob is a span of the file to read and hash: a segment to cut, or
// adjacent pieces (parts) read together, each with the parent's chunk it
// was cut as, if it was (expect).
type pieceJob struct {
	store.Piece
	parts  []store.Piece
	expect []expectedChunk
}

// expectedChunk is PiecePlan.Parent's answer for a piece.
type expectedChunk struct {
	id blockstore.ID
	ok bool
}

// groupBytes is how many bytes of adjacent pieces shorter than it a
// hasher reads at once.
const groupBytes = 256 << 10

// writeView reads a file being written: from the write being recorded,
// where it holds the bytes asked for, or from the spool, which waits for
// the writes answered early (asyncwrite.go). A llama.cpp file's plan
// reads each block's header as the writes pass it: from the write, which
// does not wait.
type writeView struct {
	sp   io.ReaderAt
	data []byte // the write being recorded, at off
	off  int64
}

func (v *writeView) ReadAt(p []byte, off int64) (int, error) {
	if off >= v.off && off+int64(len(p)) <= v.off+int64(len(v.data)) {
		return copy(p, v.data[off-v.off:]), nil
	}
	return v.sp.ReadAt(p, off)
}

// pieceQueue is how many written pieces may wait to be hashed (256 MiB
// of 64 KiB chunks, 224 KiB of queue). A write that finds the queue full
// waits for the hashers (they need none of the writer's locks): left to
// the commit, such pieces were hashed there on one goroutine, and the
// engine's header, written last, completes every piece at once (see
// first).
const pieceQueue = 4096

// trackPieces makes the spool of a new snapshot hash its chunks as they
// are written; plan makes the store's plan from the bytes written so far
// (Store.SnapshotPieces). Called before the first write.
func (sp *spool) trackPieces(plan func(io.ReaderAt, int64) (*store.PiecePlan, error), cutter func([]byte, int64) []store.Piece) {
	sp.pieces = &pieceHasher{plan: plan, done: &sp.hashing, read: sp.readRange, C: sp.C, first: -1, cutter: cutter,
		view: &writeView{sp: sp}}
	if sp.stored != nil {
		sp.pieces.wroteNew = sp.wroteNewPieces
	}
}

// wrote records a write of data, of which n bytes landed at off (err: it
// failed, in part or whole), and queues the pieces it completed.
func (h *pieceHasher) wrote(data []byte, off, n int64, err error) {
	if h.inOrder < 0 {
		return
	}
	h.view.data, h.view.off = data[:n], off
	defer func() { h.view.data = nil }()
	if err != nil {
		h.broken()
		return
	}
	if h.first < 0 {
		h.first = off
	}
	switch {
	case off >= h.inOrder:
		if off > h.inOrder && h.p != nil {
			h.p.SkipTo(off) // a hole: its segments are not cut
		}
		h.inOrder = off + n
	case h.p == nil && off >= h.gapAt && off+n <= h.first:
		h.gapAt = off + n // the header, into the hole left for it
	default:
		h.broken()
		return
	}
	if h.p == nil {
		if h.first > 0 && h.gapAt < h.first || h.inOrder < h.planAt {
			return // planned once the whole hole is written
		}
		p, err := h.plan(h.view, h.inOrder) // all of it written from 0 on
		if errors.Is(err, store.ErrMorePieces) {
			h.planAt = 2 * h.inOrder
			return
		}
		if err != nil {
			h.broken() // not a snapshot chunked by rows
			return
		}
		h.p = p
		if p.Segments() {
			h.cut = h.cutter
		}
	}
	for {
		off, n, ok := h.p.Next(h.inOrder)
		if !ok {
			break
		}
		g := &h.group
		if g.N > 0 && (off != g.Off+g.N || g.N >= groupBytes || h.cut != nil) {
			h.queue()
		}
		if g.N == 0 {
			g.Off = off
		}
		g.N += n
		g.parts = append(g.parts, store.Piece{Off: off, N: n})
		id, ok := h.p.Parent()
		g.expect = append(g.expect, expectedChunk{id, ok})
	}
	h.queue()
}

// queue hands the pieces grouped so far to the hashers.
func (h *pieceHasher) queue() {
	g := h.group
	if g.N == 0 {
		return
	}
	h.group = pieceJob{}
	if h.q == nil {
		h.q = make(chan pieceJob, pieceQueue)
		for range hashWorkers() {
			go h.run(h.q)
		}
	}
	h.done.Add(1)
	h.q <- g
}

// piecesCover reports whether the pieces' hashes stand in for the cells':
// a new snapshot written in order is committed by its row pieces, never on
// the grid of cells, so hashing its cells too hashed every byte twice
// (issue 28: sha256 was 47% of the daemon's CPU writing a prefix-growth
// series, a third of it the cells'). Once the file is written out of
// order, or turns out not to be a snapshot, the cells are hashed again
// from the next write on, and the commit hashes the ones skipped. A blob
// (whole) keeps its cells: its whole hash is fed from them.
func (sp *spool) piecesCover() bool {
	return sp.pieces != nil && sp.pieces.inOrder >= 0 && sp.whole == nil
}

// broken drops the sums: the file is no longer written only in order.
func (h *pieceHasher) broken() { h.inOrder = -1 }

// truncated records a truncation to size.
func (h *pieceHasher) truncated(size int64) {
	if size < h.inOrder {
		h.broken() // bytes it hashed are cut
	}
}

// run hashes queued pieces; a segment, it cuts first (h.cut).
func (h *pieceHasher) run(q <-chan pieceJob) {
	var buf []byte
	for j := range q {
		if int64(len(buf)) < j.N {
			buf = make([]byte, max(j.N, h.C))
		}
		if b := buf[:j.N]; h.read(b, j.Off) {
			pieces, expect := j.parts, j.expect
			if h.cut != nil {
				pieces, expect = h.cut(b, j.Off), nil // j is one segment
			}
			stored := make([]bool, len(pieces))
			for i := range pieces {
				c := &pieces[i]
				c.Sum, c.Summed = blockstore.Sum(b[c.Off-j.Off:][:c.N]), true
				stored[i] = expect != nil && expect[i].ok && expect[i].id == c.Sum
			}
			h.mu.Lock()
			h.summed = append(h.summed, pieces...)
			h.mu.Unlock()
			if h.wroteNew != nil {
				h.wroteNew(pieces, stored)
			}
		}
		h.done.Done()
	}
}

// sums returns the pieces hashed, in file order, if the file was written
// in order; called once the hashing is done.
func (h *pieceHasher) sums() []store.Piece {
	if h.inOrder < 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	slices.SortFunc(h.summed, func(a, b store.Piece) int { return cmp.Compare(a.Off, b.Off) })
	return h.summed
}

// stop ends the goroutine, once the hashing is done.
func (h *pieceHasher) stop() {
	if h.q != nil {
		close(h.q)
	}
}
