package mlx

import (
	"context"
	"fmt"
	"io"
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
}

// WholeSlot is one tensor of a WholeView.
type WholeSlot struct {
	Off    int64 // absolute file offset
	Bytes  int64
	Blocks []BlockRef
}

// NewWholeView resolves a format-5 snapshot. It reads every tensor once
// from blocks, to compute the Bun.hash that the whole layout records; a
// block that is missing, short or long fails it.
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
	v := &WholeView{Header: h, DataStart: dataStart, Size: size}
	buf := make([]byte, verifyBufBytes)
	for i, t := range h.Slots() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hasher := NewHasher()
		if _, err := io.CopyBuffer(hasher, s.SlotReader(i, nil, blocks), buf); err != nil {
			return nil, err
		}
		t.Hash = HashHex(hasher.Sum64())
		v.Slots = append(v.Slots, WholeSlot{Off: dataStart + t.Off, Bytes: t.Bytes, Blocks: src[i].Blocks})
	}
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
// the file's size.
func (v *WholeView) Pieces(off, n int64) []Piece {
	var out []Piece
	end := min(off+n, v.Size)
	for off < end {
		if off < int64(len(v.Prefix)) {
			k := min(end, int64(len(v.Prefix))) - off
			out = append(out, Piece{FileOff: off, Len: k})
			off += k
			continue
		}
		// The slot containing off, or the gap before the next one.
		next := end
		found := false
		for _, sl := range v.Slots {
			if sl.Bytes == 0 {
				continue
			}
			if off >= sl.Off && off < sl.Off+sl.Bytes {
				pos := sl.Off
				for _, b := range sl.Blocks {
					if off < pos+b.Bytes {
						k := min(end, pos+b.Bytes) - off
						out = append(out, Piece{FileOff: off, Len: k, Block: b.Hash, BlockOff: off - pos})
						off += k
						break
					}
					pos += b.Bytes
				}
				found = true
				break
			}
			if sl.Off > off {
				next = min(next, sl.Off)
			}
		}
		if !found {
			out = append(out, Piece{FileOff: off, Len: next - off, Zero: true})
			off = next
		}
	}
	return out
}
