package llamastate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// Magics and versions of the formats Parse reads (llama.h).
const (
	MagicSeq       = 0x67677371 // "ggsq": a sequence's state
	VersionSeq     = 3
	MagicSession   = 0x6767736e // "ggsn": a whole context's session
	VersionSession = 10
)

// Bounds on what a header may declare, so that a hostile file cannot make
// Parse allocate or loop without end. They are far above any model.
const (
	maxLayers   = 4096
	maxStreams  = 256
	maxCaches   = 2 // a sliding-window model's base and SWA caches
	maxArchName = 256
	maxSeqIDs   = 1 << 16 // per cell
	cellExtLen  = 12      // llama_kv_cell_ext: x, y, tok
	preambleLen = 12      // magic, version, n_token
)

// ErrNotState: the bytes do not start with a state file's magic.
var ErrNotState = errors.New("not a llama.cpp state file")

// File is the layout of a state file.
type File struct {
	Magic, Version uint32
	Tokens         []uint32 // the prompt's tokens (llama_token, as read)
	Arch           string   // the model's architecture (session files only)
	Size           int64
	Caches         []Cache
}

// Cache is one KV cache's state: its streams (one unless the context keeps
// a stream per sequence).
type Cache struct {
	Streams []Stream
}

// Stream is the saved cells of one stream of a cache.
type Stream struct {
	Cells  uint32
	Ext    bool  // the cells carry llama_kv_cell_ext
	VTrans bool  // V is stored transposed (flash attention off)
	Meta   int64 // offset of the cells' metadata
	K, V   []Block
}

// Block is one layer's K or V bytes: Rows runs of RowBytes each, from Off.
// A token-major block (K, and V without v_trans) is one run of
// Cells × Width bytes; a transposed V block is one run per channel of
// Cells × Width bytes (Width: the element size).
type Block struct {
	Type     int32
	Width    uint64 // bytes per cell of a run: the row size, or the element size
	Channels uint32 // transposed V: n_embd_v_gqa; 0 otherwise
	Off      int64
	Rows     int64
	RowBytes int64
}

// End is the offset just past the block.
func (b Block) End() int64 { return b.Off + b.Rows*b.RowBytes }

// Sniff reports whether the first bytes of a file (at least 8) are those
// of a state file Parse reads.
func Sniff(b []byte) bool {
	if len(b) < 8 {
		return false
	}
	m, v := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	return m == MagicSeq && v == VersionSeq || m == MagicSession && v == VersionSession
}

// Blocks returns every block of the file in file order.
func (f *File) Blocks() []Block {
	var out []Block
	for _, c := range f.Caches {
		for _, s := range c.Streams {
			out = append(append(out, s.K...), s.V...)
		}
	}
	return out
}

// DataStart is the offset of the first block (the file's size if it has
// none): what lies before it are the tokens and the cells' metadata.
func (f *File) DataStart() int64 {
	for _, b := range f.Blocks() {
		return b.Off
	}
	return f.Size
}

// Key identifies files whose blocks correspond: the same magic, version,
// architecture, caches, streams, and per block the same type, width and
// channels. Only the cell and token counts may differ. It begins with the
// head's key (Head.KeyPrefix), so that the files a file being written may
// share rows with are found from its head.
func (f *File) Key() string {
	var k0 Block
	var vtrans bool
	var layers uint32
	if len(f.Caches) > 0 && len(f.Caches[0].Streams) > 0 {
		st := f.Caches[0].Streams[0]
		vtrans, layers = st.VTrans, uint32(len(st.K))
		if len(st.K) > 0 {
			k0 = st.K[0]
		}
	}
	h := sha256.New()
	n := func(v uint64) { h.Write(binary.AppendUvarint(nil, v)) }
	n(uint64(f.Magic))
	n(uint64(f.Version))
	n(uint64(len(f.Arch)))
	h.Write([]byte(f.Arch))
	n(uint64(len(f.Caches)))
	for _, c := range f.Caches {
		n(uint64(len(c.Streams)))
		for _, s := range c.Streams {
			flags := uint64(0)
			if s.Cells > 0 {
				flags |= 1
			}
			if s.Ext {
				flags |= 2
			}
			if s.VTrans {
				flags |= 4
			}
			n(flags)
			n(uint64(len(s.K)))
			n(uint64(len(s.V)))
			for _, b := range append(append([]Block(nil), s.K...), s.V...) {
				n(uint64(uint32(b.Type)))
				n(b.Width)
				n(uint64(b.Channels))
			}
		}
	}
	return keyPrefix(headKey(f.Magic, f.Version, f.Arch, vtrans, layers, k0)) + hex.EncodeToString(h.Sum(nil))
}

// Parse reads the layout of the state file src of size bytes; name is
// for errors. It fails unless the blocks end exactly at the end of the
// file.
func Parse(src io.ReaderAt, size int64, name string) (*File, error) {
	f, err := parse(src, size, false)
	if err != nil && !errors.Is(err, ErrNotState) {
		// The cells of a model with 2D positions carry 12 bytes more each;
		// nothing in the file says so but the layout that then fits.
		if g, err2 := parse(src, size, true); err2 == nil {
			return g, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("llama.cpp state %s: %w", name, err)
	}
	return f, nil
}

// reader reads little-endian fields in order from a window of the file,
// counting its offset and refusing to go past the end.
type reader struct {
	src    io.ReaderAt
	off    int64
	size   int64
	win    []byte // the file's bytes from winOff
	winOff int64
	err    error
	// short: err is that the bytes end before a field or a run does,
	// which for a file still being written (ParseHead) means not yet.
	short bool
}

// window is how much reader reads at a time: the cells' metadata is read
// field by field, a few bytes each.
const window = 64 << 10

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("at %d: %s", r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) bytes(b []byte) {
	if r.err != nil {
		return
	}
	n := int64(len(b))
	if n > r.size-r.off {
		r.fail("%d bytes past the end (%d)", n-(r.size-r.off), r.size)
		r.short = true
		return
	}
	if r.off < r.winOff || r.off+n > r.winOff+int64(len(r.win)) {
		w := min(max(window, n), r.size-r.off)
		if cap(r.win) < int(w) {
			r.win = make([]byte, w)
		}
		r.win = r.win[:w]
		if k, err := r.src.ReadAt(r.win, r.off); int64(k) < w {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			r.err = fmt.Errorf("read at %d: %w", r.off, err)
			return
		}
		r.winOff = r.off
	}
	copy(b, r.win[r.off-r.winOff:])
	r.off += n
}

func (r *reader) u32() uint32 {
	var b [4]byte
	r.bytes(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func (r *reader) u64() uint64 {
	var b [8]byte
	r.bytes(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// skip moves past n bytes that Parse does not read (a block's data).
func (r *reader) skip(n int64) {
	if r.err != nil {
		return
	}
	if n < 0 || n > r.size-r.off {
		r.fail("a run of %d bytes past the end (%d)", n, r.size)
		r.short = n >= 0
		return
	}
	r.off += n
}

// product returns a×b, failing on overflow or a result past the end.
func (r *reader) product(a, b uint64, what string) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 || lo > math.MaxInt64 || int64(lo) > r.size-r.off {
		r.fail("%s: %d × %d bytes, past the end of the file (%d)", what, a, b, r.size)
		r.short = hi == 0 && lo <= math.MaxInt64
		return 0
	}
	return int64(lo)
}

// mul returns a×b, failing on overflow.
func (r *reader) mul(a, b uint64, what string) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 || lo > math.MaxInt64 {
		r.fail("%s: %d × %d bytes", what, a, b)
		return 0
	}
	return int64(lo)
}

func parse(src io.ReaderAt, size int64, ext bool) (*File, error) {
	r := &reader{src: src, size: size}
	var pre [preambleLen]byte
	r.bytes(pre[:])
	if r.err != nil || !Sniff(pre[:]) {
		return nil, ErrNotState
	}
	f := &File{Magic: binary.LittleEndian.Uint32(pre[:]), Version: binary.LittleEndian.Uint32(pre[4:]), Size: size}
	r.preamble(f, binary.LittleEndian.Uint32(pre[8:]))
	if r.err != nil {
		return nil, r.err
	}
	for r.err == nil && r.off < size {
		if len(f.Caches) == maxCaches {
			r.fail("%d bytes after %d caches", size-r.off, maxCaches)
			break
		}
		f.Caches = append(f.Caches, r.cache(ext))
	}
	if r.err == nil && len(f.Caches) == 0 {
		r.fail("no cache")
	}
	if r.err != nil {
		return nil, r.err
	}
	return f, nil
}

// preamble reads the nTok tokens after the magic, version and count,
// and a session file's architecture name.
func (r *reader) preamble(f *File, nTok uint32) {
	tb := make([]byte, r.product(uint64(nTok), 4, "tokens"))
	r.bytes(tb)
	if r.err != nil {
		return
	}
	f.Tokens = make([]uint32, nTok)
	for i := range f.Tokens {
		f.Tokens[i] = binary.LittleEndian.Uint32(tb[4*i:])
	}
	if f.Magic == MagicSession {
		n := r.u32()
		if n > maxArchName {
			r.fail("architecture name of %d bytes", n)
		}
		if r.err == nil {
			b := make([]byte, n)
			r.bytes(b)
			f.Arch = string(b)
		}
	}
}

// cache reads one KV cache's streams.
func (r *reader) cache(ext bool) Cache {
	var c Cache
	n := r.u32()
	if r.err == nil && (n == 0 || n > maxStreams) {
		r.fail("%d streams", n)
	}
	for s := uint32(0); s < n && r.err == nil; s++ {
		c.Streams = append(c.Streams, r.stream(ext))
	}
	return c
}

// stream reads one stream: its cells' metadata, then its blocks.
func (r *reader) stream(ext bool) Stream {
	st, layers := r.streamHead(ext)
	if r.err != nil || st.Cells == 0 {
		return st
	}
	for l := uint32(0); l < 2*layers && r.err == nil; l++ {
		b := r.block(st.Cells, st.VTrans && l >= layers)
		r.skip(r.product(uint64(b.Rows), uint64(b.RowBytes), "a layer's rows"))
		if l < layers {
			st.K = append(st.K, b)
		} else {
			st.V = append(st.V, b)
		}
	}
	return st
}

// streamHead reads a stream's cell count, its cells' metadata, v_trans
// and its layer count: all that comes before its blocks.
func (r *reader) streamHead(ext bool) (st Stream, layers uint32) {
	st = Stream{Cells: r.u32(), Ext: ext}
	if r.err != nil || st.Cells == 0 {
		return st, 0
	}
	cells := uint64(st.Cells)
	per := uint64(8)
	if ext {
		per += cellExtLen
	}
	r.product(cells, per, "cell metadata") // at least this much must follow
	st.Meta = r.off
	var extb [cellExtLen]byte
	for i := uint64(0); i < cells && r.err == nil; i++ {
		r.u32() // pos
		nSeq := r.u32()
		if ext {
			r.bytes(extb[:])
		}
		if nSeq > maxSeqIDs {
			r.fail("cell %d: %d sequence ids", i, nSeq)
		}
		r.skip(r.product(uint64(nSeq), 4, "sequence ids"))
	}
	vt := r.u32()
	layers = r.u32()
	if r.err != nil {
		return st, 0
	}
	if vt > 1 || layers == 0 || layers > maxLayers {
		r.fail("v_trans %d, %d layers", vt, layers)
		return st, 0
	}
	st.VTrans = vt == 1
	return st, layers
}

// block reads a block's header, a K block's or a V block's (transposed:
// vtrans), and returns the block from just past it; its data, which the
// caller skips, need not be there yet.
func (r *reader) block(cells uint32, vtrans bool) Block {
	if !vtrans {
		b := Block{Type: int32(r.u32()), Width: r.u64()}
		if r.err == nil && b.Width == 0 {
			r.fail("rows of 0 bytes")
		}
		b.Off, b.Rows = r.off, 1
		b.RowBytes = r.mul(uint64(cells), b.Width, "a layer's rows")
		return b
	}
	b := Block{Type: int32(r.u32()), Width: uint64(r.u32()), Channels: r.u32()}
	if r.err == nil && (b.Width == 0 || b.Channels == 0) {
		r.fail("V of %d channels of %d-byte elements", b.Channels, b.Width)
	}
	b.Off, b.Rows = r.off, int64(b.Channels)
	b.RowBytes = r.mul(uint64(cells), b.Width, "a channel's run")
	return b
}
