package llamastate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
)

// A state file is written in order, from its tokens to its last block, and
// a store that hashes a file's rows as they arrive needs their layout
// before the file is whole. ParseHead reads what comes before the blocks
// of a file's first stream, and a Walk reads each block's header as the
// writes pass it: both from a file still being written, where running
// out of bytes means "not yet" (ErrShort), not a truncated file. They
// read the common layout only: the cells of a model with 2D positions
// (Stream.Ext) are told apart by Parse once the file is whole, and a head
// read as the common layout from such a file yields blocks that Parse of
// the whole file does not; the store only ever uses them to hash bytes
// early, and checks them against the whole file's.

// ErrShort: the file's bytes end before the field asked for.
var ErrShort = errors.New("state file not written that far yet")

// blockHeaderLen is the length of every block's header: i32 type and u64
// row size, or, transposed V, i32 type, u32 element size, u32 channels.
const blockHeaderLen = 12

// Head is the start of a state file: its tokens, and its first cache's
// first stream up to its first block.
type Head struct {
	Magic, Version uint32
	Tokens         []uint32
	Arch           string
	Cells          uint32 // the first stream's
	VTrans         bool
	Layers         uint32
	K0             Block // the first K block, from its header
}

// ParseHead reads the head of the state file whose first n bytes src
// holds. It returns ErrShort if they end before the first block's header
// does, and an error for a first stream of no cells.
func ParseHead(src io.ReaderAt, n int64) (*Head, error) {
	r := &reader{src: src, size: n}
	var pre [preambleLen]byte
	r.bytes(pre[:])
	if r.err != nil {
		return nil, ErrShort
	}
	if !Sniff(pre[:]) {
		return nil, ErrNotState
	}
	f := &File{Magic: binary.LittleEndian.Uint32(pre[:]), Version: binary.LittleEndian.Uint32(pre[4:])}
	r.preamble(f, binary.LittleEndian.Uint32(pre[8:]))
	if streams := r.u32(); r.err == nil && (streams == 0 || streams > maxStreams) {
		r.fail("%d streams", streams)
	}
	st, layers := r.streamHead(false)
	if r.err == nil && st.Cells == 0 {
		r.fail("no cells in the first stream")
	}
	h := &Head{Magic: f.Magic, Version: f.Version, Tokens: f.Tokens, Arch: f.Arch,
		Cells: st.Cells, VTrans: st.VTrans, Layers: layers}
	if r.err == nil {
		h.K0 = r.block(st.Cells, false)
	}
	if r.err != nil {
		if r.short {
			return nil, ErrShort
		}
		return nil, r.err
	}
	return h, nil
}

// Key is the part of Key (File.Key) that the head decides: files of the
// same full key have the same head key.
func (h *Head) Key() string {
	return headKey(h.Magic, h.Version, h.Arch, h.VTrans, h.Layers, h.K0)
}

// headKey hashes what a Head holds of a file's shape, to 16 hex digits.
func headKey(magic, version uint32, arch string, vtrans bool, layers uint32, k0 Block) string {
	h := sha256.New()
	n := func(v uint64) { h.Write(binary.AppendUvarint(nil, v)) }
	n(uint64(magic))
	n(uint64(version))
	n(uint64(len(arch)))
	h.Write([]byte(arch))
	if vtrans {
		n(1)
	} else {
		n(0)
	}
	n(uint64(layers))
	n(uint64(uint32(k0.Type)))
	n(k0.Width)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// KeyPrefix is how every Key of files with this head begins.
func (h *Head) KeyPrefix() string { return keyPrefix(h.Key()) }

func keyPrefix(head string) string { return "llama:" + head + ":" }

// Walk follows the blocks of a Head's stream, K then V, as the file is
// written.
type Walk struct {
	cells  uint32
	vtrans bool
	layers uint32
	next   int64  // the offset of the next block's header
	done   uint32 // the blocks returned
}

// Walk starts a walk at the first block.
func (h *Head) Walk() *Walk {
	return &Walk{cells: h.Cells, vtrans: h.VTrans, layers: h.Layers, next: h.K0.Off - blockHeaderLen}
}

// Done reports whether the walk returned the stream's last block.
func (w *Walk) Done() bool { return w.done == 2*w.layers }

// Next returns the next block once its header lies within the first n
// bytes of src; ok is false if it does not yet, or after the stream's
// last block. An error is a header no state file has.
func (w *Walk) Next(src io.ReaderAt, n int64) (b Block, ok bool, err error) {
	if w.Done() {
		return Block{}, false, nil
	}
	r := &reader{src: src, size: n, off: w.next}
	b = r.block(w.cells, w.vtrans && w.done >= w.layers)
	if r.err == nil {
		if size := r.mul(uint64(b.Rows), uint64(b.RowBytes), "a block"); size > math.MaxInt64-b.Off {
			r.fail("a block of %d bytes", size)
		}
	}
	if r.err != nil {
		if r.short {
			return Block{}, false, nil
		}
		return Block{}, false, fmt.Errorf("block %d: %w", w.done, r.err)
	}
	w.next = b.End()
	w.done++
	return b, true, nil
}
