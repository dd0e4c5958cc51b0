package mlx

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// PrefixView is a snapshot cut to its first N tokens (Trim), seen as the
// whole-layout file the engine would have written for those tokens. Like
// WholeView it is a map, not a copy: Prefix holds the view's first
// DataStart bytes, and every tensor byte comes from the original, from its
// own file (whole layout) or from its blocks (blocks layout). Nothing is
// written to make one; the tensor hashes the header records are computed
// once, by reading the N tokens' bytes.
type PrefixView struct {
	Header    *Header // format 3 or 4, tensor hashes set
	Prefix    []byte  // magic, header, zero padding: the first DataStart bytes
	DataStart int64
	Size      int64
	// Runs are where the tensor bytes come from, by offset in the view,
	// without overlap; the gaps between them are zeros.
	Runs []Run
}

// Run is Len bytes of a PrefixView at FileOff, read at SrcOff of the
// original's own file (Block "") or of its block Block.
type Run struct {
	FileOff, Len int64
	Block        string
	SrcOff       int64
}

// ViewSource opens what a PrefixView reads: the original snapshot's own
// file (block "") or one of its blocks, with its size.
type ViewSource interface {
	OpenSource(block string) (io.ReaderAt, int64, error)
}

// NewPrefixView cuts s to its first n tokens (Trim: an n the kinds do not
// allow fails with ErrNotTrimmable) and maps every byte of the result to
// the original's bytes, which it reads once to hash each tensor. A block
// that is missing, or whose size is not the one the manifest lists, fails
// it with the source's error or ErrMalformed.
func NewPrefixView(ctx context.Context, s *Snapshot, n int64, src ViewSource) (*PrefixView, error) {
	tr, err := Trim(s.Header, n)
	if err != nil {
		if fe, ok := err.(*FormatError); ok {
			fe.File = s.Name
		}
		return nil, err
	}
	h := tr.Header
	dataStart, size, err := PlanWhole(h)
	if err != nil {
		return nil, err
	}
	v := &PrefixView{Header: h, DataStart: dataStart, Size: size}
	from := s.Header.Slots()
	sizes := map[string]int64{} // blocks checked against their listed size
	buf := make([]byte, verifyBufBytes)
	for i, t := range h.Slots() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pos := dataStart + t.Off
		hasher := NewHasher()
		for _, e := range tr.Extents[i] {
			runs := sourceRuns(s, from[e.Slot], e, pos)
			for _, r := range runs {
				if err := r.check(src, sizes, s.Name); err != nil {
					return nil, err
				}
				if err := r.copy(hasher, src, buf); err != nil {
					return nil, fmt.Errorf("%s: read %s: %w", s.Name, r.source(), err)
				}
			}
			v.Runs = append(v.Runs, runs...)
			pos += e.Len
		}
		t.Hash = HashHex(hasher.Sum64())
	}
	sort.SliceStable(v.Runs, func(a, b int) bool { return v.Runs[a].FileOff < v.Runs[b].FileOff })
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

// sourceRuns maps extent e of source slot t to the original's bytes, the
// first of them at view offset pos: one run in a whole-layout file, one
// per block (or part of one) in a blocks-layout snapshot.
func sourceRuns(s *Snapshot, t *Slot, e Extent, pos int64) []Run {
	if e.Len == 0 {
		return nil
	}
	if !s.Blocks() {
		return []Run{{FileOff: pos, Len: e.Len, SrcOff: s.DataStart() + t.Off + e.Off}}
	}
	var out []Run
	start, end := e.Off, e.Off+e.Len
	bpos := int64(0) // offset in the tensor of block b
	for _, b := range t.Blocks {
		bend := bpos + b.Bytes
		if bend > start && bpos < end {
			lo, hi := max(start, bpos), min(end, bend)
			out = append(out, Run{FileOff: pos + lo - start, Len: hi - lo, Block: b.Hash, SrcOff: lo - bpos})
		}
		if bend >= end {
			break
		}
		bpos = bend
	}
	return out
}

func (r Run) source() string {
	if r.Block == "" {
		return "snapshot data"
	}
	return "block " + r.Block
}

// check fails for a block whose size differs from the manifest's: the
// engine's synchronous loader refuses it too (FORMAT.md §4.5).
func (r Run) check(src ViewSource, sizes map[string]int64, name string) error {
	if r.Block == "" {
		return nil
	}
	if _, ok := sizes[r.Block]; ok {
		return nil
	}
	_, n, err := src.OpenSource(r.Block)
	if err != nil {
		return fmt.Errorf("%s: block %s: %w", name, r.Block, err)
	}
	sizes[r.Block] = n
	if r.SrcOff+r.Len > n {
		return &FormatError{File: name, Check: "block " + r.Block, Err: ErrMalformed,
			Detail: fmt.Sprintf("%d bytes, the manifest reads up to %d", n, r.SrcOff+r.Len)}
	}
	return nil
}

func (r Run) copy(w io.Writer, src ViewSource, buf []byte) error {
	f, _, err := src.OpenSource(r.Block)
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(w, io.NewSectionReader(f, r.SrcOff, r.Len), buf)
	if err == nil && n != r.Len {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// MemBytes estimates the memory v holds, for the view cache's bound.
func (v *PrefixView) MemBytes() int64 {
	n := int64(len(v.Prefix)) + 1024 + int64(cap(v.Runs))*(8*4+16+64)
	if v.Header != nil {
		n += int64(cap(v.Header.Tokens)) * 4
		for _, t := range v.Header.Slots() {
			n += 96 + int64(cap(t.Shape))*8
		}
	}
	return n
}

// ViewPiece is where a run of a PrefixView's bytes comes from: its Prefix
// (Prefix), zeros (Zero), or a Run's source at SrcOff.
type ViewPiece struct {
	FileOff, Len int64
	Prefix, Zero bool
	Block        string // "" with neither flag: the original's own file
	SrcOff       int64
}

// Pieces maps [off, off+n) of the view to its sources, clipped to the
// view's size; it finds the first run by binary search.
func (v *PrefixView) Pieces(off, n int64) []ViewPiece {
	var out []ViewPiece
	end := min(off+n, v.Size)
	if off < 0 || off >= end {
		return nil
	}
	if off < int64(len(v.Prefix)) {
		k := min(end, int64(len(v.Prefix))) - off
		out = append(out, ViewPiece{FileOff: off, Len: k, Prefix: true})
		off += k
	}
	i := sort.Search(len(v.Runs), func(i int) bool { return v.Runs[i].FileOff+v.Runs[i].Len > off })
	for ; off < end && i < len(v.Runs); i++ {
		r := v.Runs[i]
		if off < r.FileOff {
			k := min(end, r.FileOff) - off
			out = append(out, ViewPiece{FileOff: off, Len: k, Zero: true})
			off += k
			if off >= end {
				break
			}
		}
		k := min(end, r.FileOff+r.Len) - off
		out = append(out, ViewPiece{FileOff: off, Len: k, Block: r.Block, SrcOff: r.SrcOff + off - r.FileOff})
		off += k
	}
	if off < end {
		out = append(out, ViewPiece{FileOff: off, Len: end - off, Zero: true})
	}
	return out
}
