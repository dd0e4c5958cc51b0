package store

import (
	"errors"
	"fmt"
	"sort"

	"github.com/kvfs/kvfs/manifest"
)

// A file cut by its content (cdc.go) is not on the grid of cells that
// CommitChanges' writers report their changes in: a changed cell lies
// across chunks of any length. Committing such a file's changes used to
// mean reading and hashing all of it again (CommitIno): an fsync after a
// 4 KiB write into 256 MiB cost 256 MiB. planExtentChanges cuts again
// only the chunks the changed cells touch, whole, from the new content,
// and keeps every other chunk of the previous version as it is. A cut
// again starts where the previous version's chunk started, so the chunks
// after the change are cut where a cut of the whole file would cut them,
// once the content cuts fall in step again (within a chunk or two).

// span is a byte range [a, b) of a file.
type span struct{ a, b int64 }

// mergeSpans sorts spans and merges those that overlap or touch.
func mergeSpans(ss []span) []span {
	sort.Slice(ss, func(i, j int) bool { return ss[i].a < ss[j].a })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.a <= out[n-1].b {
			out[n-1].b = max(out[n-1].b, s.b)
			continue
		}
		out = append(out, s)
	}
	return out
}

// planExtentChanges plans a commit of changes to a file whose previous
// version pm is not on the grid: the regions to cut are the changed
// cells widened to whole chunks of pm (and any chunk that the kept size
// cuts), read from in.src, the whole new content; every other chunk of
// pm below Keep is kept, and what lies above Keep and outside the
// changes is zeros.
func (in *ingest) planExtentChanges(ch Changes, pm manifest.Manifest) error {
	C := in.s.chunkSize
	size := ch.Size
	keep := min(ch.Keep, size)
	if ch.Keep > pm.Size() {
		return fmt.Errorf("changes keep %d bytes of a %d-byte version", ch.Keep, pm.Size())
	}
	var redo []span
	for i, d := range ch.Dirty {
		a := d.Index * C
		if d.Index < 0 || a >= size || i > 0 && d.Index <= ch.Dirty[i-1].Index {
			return fmt.Errorf("dirty chunk %d of a %d-byte file (or out of order)", d.Index, size)
		}
		redo = append(redo, span{a, min(a+C, size)})
	}
	redo = mergeSpans(redo)
	// Widen: a chunk of pm below keep that a change touches, or that
	// keep cuts, is cut again whole.
	var off int64
	j := 0 // the first of redo that may still touch the extents from off
	var widen []span
	for _, e := range pm {
		start, end := off, off+e.Len
		off = end
		if start >= keep {
			break
		}
		if e.Zero {
			continue // zeros may be cut anywhere
		}
		for j < len(redo) && redo[j].b <= start {
			j++
		}
		if end > keep || j < len(redo) && redo[j].a < end {
			widen = append(widen, span{start, min(end, size)})
		}
	}
	redo = mergeSpans(append(redo, widen...))

	// Keep what lies between the spans cut again.
	off = 0
	k := 0 // pm's extent at off
	keepGap := func(a, b int64) error {
		below := min(b, keep)
		for ; k < len(pm) && off+pm[k].Len <= a; k++ {
			off += pm[k].Len
		}
		for pos := a; pos < below; {
			e, start := pm[k], off
			end := min(start+e.Len, below)
			switch {
			case e.Damaged:
				return fmt.Errorf("keep bytes [%d,%d) of the previous version: %w", pos, end, ErrDamaged)
			case e.Zero:
				in.keep = append(in.keep, chunkRef{off: pos, n: end - pos, zero: true})
				in.stats.ZeroBytes += end - pos
			case start != pos || start+e.Len > below:
				return errors.New("planExtentChanges: a kept chunk is cut") // widening keeps chunks whole
			default:
				in.keep = append(in.keep, chunkRef{off: pos, n: e.Len, id: e.ID})
				if _, ok := in.states[e.ID]; !ok {
					in.states[e.ID] = &chunkState{off: pos}
				}
				in.stats.ReusedBytes += e.Len
			}
			pos = end
			if end == start+e.Len {
				off += e.Len
				k++
			}
		}
		if from := max(a, below); from < b {
			in.keep = append(in.keep, chunkRef{off: from, n: b - from, zero: true})
			in.stats.ZeroBytes += b - from
		}
		return nil
	}
	var pos int64
	for _, r := range redo {
		if err := keepGap(pos, r.a); err != nil {
			return err
		}
		in.plan.regions = append(in.plan.regions, region{off: r.a, n: r.b - r.a, cdc: true})
		pos = r.b
	}
	if err := keepGap(pos, size); err != nil {
		return err
	}
	if in.keep == nil {
		in.keep = []chunkRef{} // merged even when nothing is kept
	}
	return nil
}
