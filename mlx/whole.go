package mlx

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
)

// WholeView is a blocks-layout (format 5) snapshot seen as the
// whole-layout file with the same tensors: what the engine would have
// written with the whole layout. It is a map, not a copy: Prefix holds the
// file's first DataStart bytes, and each tensor's bytes come from its
// blocks.
type WholeView struct {
	Header    *Header // format 3 or 4, tensor hashes set, no block lists
	Prefix    []byte  // magic, header, zero padding: the first DataStart bytes
	DataStart int64
	Size      int64
	// Slots are the tensors in Header.Slots order: absolute offset in the
	// whole file, and the blocks that hold their bytes.
	Slots []WholeSlot
	// byOff are the indexes of the Slots that hold bytes, by offset.
	byOff []int
}

// WholeSlot is one tensor of a WholeView.
type WholeSlot struct {
	Off    int64 // absolute file offset
	Bytes  int64
	Blocks []BlockRef
	// ends are the offsets in the tensor at which each block ends, for
	// Pieces to find a block by binary search.
	ends []int64
}

// NewWholeView resolves a format-5 snapshot. It reads every tensor once
// from blocks, to compute the Bun.hash that the whole layout records; a
// block that is missing, short or long fails it.
//
// Its cost is linear in the tensors and block references (the header's
// slots are listed once: a header of 100,000 empty tensors once cost
// minutes, listing them again for each), besides reading the blocks.
func NewWholeView(ctx context.Context, s *Snapshot, blocks BlockSource) (*WholeView, error) {
	if !s.Blocks() {
		return nil, fmt.Errorf("%s: not a blocks-layout snapshot", s.Name)
	}
	h := s.Header.Clone()
	src := s.Header.Slots()
	dataStart, size, err := PlanWhole(h)
	if err != nil {
		return nil, err
	}
	dst := h.Slots()
	v := &WholeView{Header: h, DataStart: dataStart, Size: size, Slots: make([]WholeSlot, 0, len(dst))}
	buf := make([]byte, verifyBufBytes)
	for i, t := range dst {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hasher := NewHasher()
		r := &blockReader{s: s, slot: i, refs: src[i].Blocks, src: blocks}
		if _, err := io.CopyBuffer(hasher, r, buf); err != nil {
			return nil, err
		}
		t.Hash = HashHex(hasher.Sum64())
		ends := make([]int64, len(src[i].Blocks))
		pos := int64(0)
		for j, b := range src[i].Blocks {
			pos += b.Bytes
			ends[j] = pos
		}
		v.Slots = append(v.Slots, WholeSlot{Off: dataStart + t.Off, Bytes: t.Bytes, Blocks: src[i].Blocks, ends: ends})
	}
	v.index()
	js, err := h.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if int64(PrefixLen+len(js)) > dataStart {
		return nil, fmt.Errorf("%s: header byte-length drift", s.Name)
	}
	v.Prefix = make([]byte, dataStart)
	p := Prefix{HeaderLen: uint32(len(js)), DataStart: uint32(dataStart), HeaderHash: Hash(js)}
	p.AppendBinary(v.Prefix[:0])
	copy(v.Prefix[PrefixLen:], js)
	return v, nil
}

// index lists the tensors that hold bytes by offset, for Pieces. The
// planner lays them out in order, without overlap; they are sorted anyway.
func (v *WholeView) index() {
	v.byOff = v.byOff[:0]
	for i, sl := range v.Slots {
		if sl.Bytes > 0 {
			v.byOff = append(v.byOff, i)
		}
	}
	slices.SortStableFunc(v.byOff, func(a, b int) int { return cmp.Compare(v.Slots[a].Off, v.Slots[b].Off) })
}

// MemBytes estimates the memory v holds: its prefix, its header (tokens,
// tensors, shapes) and its tensors' block lists with their hashes. The
// view cache weighs views by it.
func (v *WholeView) MemBytes() int64 {
	const (
		sliceHeader = 24
		stringBytes = 16 + 64                                        // header and the 64 hex digits (one size class)
		blockRef    = 16 + 8                                         // BlockRef: hash string header, Bytes
		slotBytes   = 8 + 8 + sliceHeader + 8 + 16 + sliceHeader + 8 // Slot: Off, Bytes, Shape, DType, Hash, Blocks, padding
		wholeSlot   = 8 + 8 + 2*sliceHeader
	)
	n := int64(len(v.Prefix)) + 1024 + int64(cap(v.byOff))*8
	if v.Header != nil {
		n += int64(cap(v.Header.Tokens)) * 4 // uint32 each
		for _, t := range v.Header.Slots() {
			n += slotBytes + int64(cap(t.Shape))*8 + 16 + 8 // shape, hash digits, the Slots() pointer
		}
	}
	for _, sl := range v.Slots {
		n += wholeSlot + int64(cap(sl.ends))*8 + int64(cap(sl.Blocks))*(blockRef+stringBytes)
	}
	return n
}

// Piece is where a run of a WholeView's bytes comes from: Prefix bytes
// (Block ""), a range of one block, or zeros (Zero).
type Piece struct {
	FileOff  int64  // offset in the whole file
	Len      int64  // bytes
	Block    string // sha256 of the block, "" for prefix or zeros
	BlockOff int64  // offset in the block
	Zero     bool
}

// Pieces maps [off, off+n) of the whole file to its sources, clipped to
// the file's size. It finds the first tensor and block by binary search,
// so a read costs the pieces it returns, not the tensors and blocks
// before them.
func (v *WholeView) Pieces(off, n int64) []Piece {
	var out []Piece
	end := min(off+n, v.Size)
	if off < 0 || off >= end {
		return nil
	}
	if off < int64(len(v.Prefix)) {
		k := min(end, int64(len(v.Prefix))) - off
		out = append(out, Piece{FileOff: off, Len: k})
		off += k
	}
	// The first tensor that ends after off.
	i := sort.Search(len(v.byOff), func(i int) bool {
		sl := &v.Slots[v.byOff[i]]
		return sl.Off+sl.Bytes > off
	})
	for ; off < end && i < len(v.byOff); i++ {
		sl := &v.Slots[v.byOff[i]]
		if off < sl.Off {
			// Zeros up to the tensor (alignment padding).
			k := min(end, sl.Off) - off
			out = append(out, Piece{FileOff: off, Len: k, Zero: true})
			off += k
			if off >= end {
				break
			}
		}
		j := sort.Search(len(sl.ends), func(j int) bool { return sl.ends[j] > off-sl.Off })
		for ; off < end && j < len(sl.Blocks); j++ {
			pos := sl.Off + sl.ends[j] - sl.Blocks[j].Bytes
			k := min(end, sl.Off+sl.ends[j]) - off
			if k <= 0 {
				continue
			}
			out = append(out, Piece{FileOff: off, Len: k, Block: sl.Blocks[j].Hash, BlockOff: off - pos})
			off += k
		}
		if off < end && off < sl.Off+sl.Bytes {
			// Blocks shorter than the tensor (not a resolvable view):
			// zeros, as the old walk gave nothing either.
			k := min(end, sl.Off+sl.Bytes) - off
			out = append(out, Piece{FileOff: off, Len: k, Zero: true})
			off += k
		}
	}
	if off < end {
		out = append(out, Piece{FileOff: off, Len: end - off, Zero: true})
	}
	return out
}
