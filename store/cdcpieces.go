package store

import (
	"errors"
	"io"

	"github.com/kvfs/kvfs/mlx"
)

// A new file cut by its content is hashed as it is written, as a
// snapshot's rows are (pieceplan.go), so that its commit does not read
// and hash it all at fsync or close. Where its chunks will be cut is
// known only once the bytes before them are: one pass over the file. So
// the writer cuts each segment of cdcSegment bytes on its own, as if a
// cut fell at the segment's start, and hashes the chunks it cuts, all
// but the segment's last (cut by the segment's end, not the content).
// From the first cut at which a segment falls in step with the file's
// own cuts (within a chunk or two), its chunks are the file's: the
// commit (hintedCuts) cuts afresh only from each segment's start until
// it lands on the start of a chunk the writer hashed, and takes the
// writer's cuts and sums from there.

// cdcSegment is the unit a writer cuts: 1 MiB, a buffer per hashing
// goroutine; the chunks cut again at each segment's start and end are
// about a tenth of it.
const cdcSegment = 1 << 20

// ErrNotContentCut: the file is not one the store cuts by its content.
var ErrNotContentCut = errors.New("not cut by content")

// ContentPieces makes the PiecePlan of a new file from its first n bytes
// (src): a snapshot's (SnapshotPieces), a llama.cpp state file's
// (llamapieces.go) or, for a file of no format the
// store parses when the store cuts by content, one that yields segments
// of cdcSegment bytes to cut with CutSegment. It returns ErrMorePieces
// until the bytes that tell the format apart are written, and an error
// for a file whose commit hashes it whole (another engine's format, a
// store that cuts every C bytes).
func (s *Store) ContentPieces(src io.ReaderAt, n int64) (*PiecePlan, error) {
	if n < sniffLen {
		return nil, ErrMorePieces
	}
	switch sniff(src, n) {
	case kindMLXKV:
		if n < mlx.PrefixLen {
			return nil, ErrMorePieces
		}
		return s.SnapshotPieces(src, n)
	case kindLlama:
		return s.llamaPieces(src, n)
	case kindPlain:
		if !s.cutsByContent() {
			return nil, ErrNotContentCut
		}
		return &PiecePlan{c: s.chunkSize, segment: cdcSegment}, nil
	}
	return nil, ErrNotContentCut
}

// Segments reports whether the plan yields segments to cut (CutSegment)
// rather than chunks.
func (p *PiecePlan) Segments() bool { return p.segment > 0 }

// SkipTo moves a plan of segments past a hole the writer left before off
// (a write past the end): the next segment starts at off, and the bytes
// before the hole that no segment covered are left to the commit. The
// hole itself is never read: a pwrite past 10 GiB of hole made the
// writer cut and hash 10 GiB of zeros (red team, issue 29).
func (p *PiecePlan) SkipTo(off int64) {
	if p.segment > 0 && off > p.pos {
		p.pos = off
	}
}

// CutSegment cuts data, the segment of a file at off that a content
// PiecePlan yielded, as the store would if a cut fell at off, and returns
// its chunks but the last (cut by the segment's end); their sums are for
// the caller to fill in.
func (s *Store) CutSegment(data []byte, off int64) []Piece {
	p, ok := cdcParams(s.chunkSize)
	if !ok {
		return nil
	}
	cuts := p.Cuts(data)
	var out []Piece
	prev := 0
	for _, end := range cuts[:max(len(cuts)-1, 0)] {
		out = append(out, Piece{Off: off + int64(prev), N: int64(end - prev), Cut: true})
		prev = end
	}
	return out
}

// hintedCuts cuts data, the region r of a file, as one pass would, taking
// the writer's cuts where it stands on one: from a chunk the writer cut
// by its content and hashed (known, by its start, with cut set), the next
// cut is that chunk's end (the writer reported only cuts made by the
// content). A piece the writer cut as a row is no such cut.
func hintedCuts(r region, data []byte, C int64, known map[int64]knownSum) []region {
	p, _ := cdcParams(C)
	var out []region
	for pos := int64(0); pos < r.n; {
		n := int64(0)
		if k, ok := known[r.off+pos]; ok && k.cut && pos+k.n <= r.n {
			n = k.n
		} else {
			n = int64(p.Cut(data[pos:]))
		}
		out = append(out, region{off: r.off + pos, n: n})
		pos += n
	}
	return out
}
