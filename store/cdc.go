package store

import (
	"runtime"
	"sort"
	"sync"

	"github.com/kvfs/kvfs/chunker"
)

// A file of no format the store parses (another engine's cache tier, a
// checkpoint, a page-per-file store) is cut where its content says
// (chunker: FastCDC), not every C bytes from offset 0: bytes inserted or
// removed early in a file then move the cuts after them along with the
// content, and the chunks after the change are stored ones (issue 29:
// llama.cpp's state files stored 1.00× when cut every C bytes). Chunks
// average C/2 (32 KiB at the default C) and are never longer than C or
// shorter than C/8 (but the last), so the chunk index and the read path
// see chunks of the sizes they always did. Formats the store parses keep
// their rows' cuts, which follow the tokens and beat any content cut.

// cdcParams returns the content-defined chunker of a store of chunk size
// C, and false when C has no such chunker (C/2 not a power of two of at
// least 256 bytes): such a store cuts every C bytes.
func cdcParams(C int64) (chunker.Params, bool) {
	p := chunker.Params{Min: int(C / 8), Avg: int(C / 2), Max: int(C)}
	return p, C <= 1<<30 && p.Validate() == nil
}

// CutsByContent reports whether the store cuts files of no parsed format
// by their content: a writer's sums of cells on the grid of C bytes are
// then of no use to the commit of a new file.
func (s *Store) CutsByContent() bool { return s.cutsByContent() }

func (s *Store) cutsByContent() bool {
	_, ok := cdcParams(s.chunkSize)
	return ok && !s.fixed && s.Settings().Chunking != ChunkingFixed
}

// cdcCuts splits a content-cut region of data into regions of one chunk
// each, cut where the content says, exactly as one pass from its start
// would cut it, on every core: see parallelCuts.
func cdcCuts(r region, data []byte, C int64) []region {
	p, _ := cdcParams(C)
	var out []region
	var prev int
	for _, end := range parallelCuts(p, data, runtime.GOMAXPROCS(0)) {
		out = append(out, region{off: r.off + int64(prev), n: int64(end - prev)})
		prev = end
	}
	return out
}

// minSegment is the least data parallelCuts gives a goroutine.
const minSegment = 1 << 20

// parallelCuts returns p.Cuts(data), cutting segments of data on up to
// procs goroutines. A cut depends only on the cut before it and the
// bytes after that, so each segment is cut as if a cut fell at its
// start; then, in order, the cuts are continued one at a time from the
// last cut of the segments before until one lands on a cut of the next
// segment, from which on both agree, and that segment's cuts are taken
// from there (within a chunk or two, as a rule). The cuts are those of
// one pass from the start; only the work is spread.
func parallelCuts(p chunker.Params, data []byte, procs int) []int {
	segs := min(procs, len(data)/minSegment)
	if segs <= 1 {
		return p.Cuts(data)
	}
	size := (len(data) + segs - 1) / segs
	local := make([][]int, segs)
	var wg sync.WaitGroup
	for i := range segs {
		a, b := i*size, min((i+1)*size, len(data))
		wg.Add(1)
		go func() {
			defer wg.Done()
			cuts := p.Cuts(data[a:b])
			if b < len(data) {
				cuts = cuts[:len(cuts)-1] // the segment's end is no cut of data's
			}
			for k := range cuts {
				cuts[k] += a
			}
			local[i] = cuts
		}()
	}
	wg.Wait()
	out := local[0]
	last := func() int {
		if len(out) == 0 {
			return 0
		}
		return out[len(out)-1]
	}
	for i := 1; i < segs; i++ {
		next, end := local[i], min((i+1)*size, len(data))
		for pos := last(); ; {
			if k := sort.SearchInts(next, pos); k < len(next) && next[k] == pos {
				out = append(out, next[k+1:]...) // in step from here on
				break
			}
			if pos >= end {
				break // past the segment, never in step: on to the next
			}
			pos += p.Cut(data[pos:])
			out = append(out, pos)
		}
	}
	for pos := last(); pos < len(data); {
		pos += p.Cut(data[pos:])
		out = append(out, pos)
	}
	return out
}

// A content-cut region read from a sparse source (kvfs put of a file with
// holes, a commit of a file written whole) holds its holes as zeros. Cut
// by content they made a 64 KiB zero chunk per 64 KiB of hole, and as
// many manifest entries: 120 GiB of hole made a commit record past the
// journal's limit (red team, issue 29). Runs of whole zero pages of at
// least zeroRunMin bytes are stored as zero runs instead, as cuts every C
// bytes from offset 0 stored them.
const (
	holePage   = 4 << 10
	zeroRunMin = 64 << 10
)

// splitZeros splits a content-cut region into its runs of zero pages (of
// the file's pages, at least zeroRunMin long: zero regions) and the rest
// (content-cut regions), in order.
func splitZeros(r region, data []byte) []region {
	var out []region
	emit := func(a, b int64, zero bool) {
		if a < b {
			out = append(out, region{off: r.off + a, n: b - a, zero: zero, cdc: !zero})
		}
	}
	first := (holePage - r.off%holePage) % holePage
	var start int64 // the start of what is not yet emitted
	z := int64(-1)  // the start of the current run of zero pages
	p := first
	for ; p+holePage <= r.n; p += holePage {
		if isZero(data[p : p+holePage]) {
			if z < 0 {
				z = p
			}
			continue
		}
		if z >= 0 && p-z >= zeroRunMin {
			emit(start, z, false)
			emit(z, p, true)
			start = p
		}
		z = -1
	}
	if z >= 0 && p-z >= zeroRunMin {
		emit(start, z, false)
		emit(z, p, true)
		start = p
	}
	emit(start, r.n, false)
	return out
}
