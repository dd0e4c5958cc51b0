package mlx

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"runtime"
	"strings"
	"testing"
)

// memBlocks is a BlockSource of blocks in memory.
type memBlocks map[string][]byte

func (m memBlocks) OpenBlock(hash string) (io.ReadCloser, error) {
	b, ok := m[hash]
	if !ok {
		return nil, &FormatError{File: hash, Check: "block", Err: io.ErrUnexpectedEOF}
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// hostileSnapshot is a format-5 snapshot of pad cache entries of two empty
// tensors each, then one of two bf16 [1,1,T,64] tensors listing refs
// references each to the same 1-byte block (a distinct hash string per
// reference, as the JSON decoder makes them): the red team's headers.
func hostileSnapshot(pad, T, refs int) (*Snapshot, memBlocks) {
	blk := []byte{1}
	sum := sha256.Sum256(blk)
	hash := hex.EncodeToString(sum[:])
	h := &Header{FormatVersion: 5, CreatedAt: 1767225600000, ModelID: "rt/x", ConfigFingerprint: "fp",
		TokenizerHash: "tk", CodecProvider: DefaultCodecProvider}
	for i := 0; i < T; i++ {
		h.Tokens = append(h.Tokens, uint32(i))
	}
	empty := func() Slot { return Slot{Shape: []int64{1, 1, 0, 64}, DType: BFloat16, Blocks: []BlockRef{}} }
	for i := 0; i < pad; i++ {
		h.Caches = append(h.Caches, CacheEntry{Kind: KindKV, Offset: int64(T), Tensors: []Slot{empty(), empty()}})
	}
	full := func() Slot {
		s := Slot{Shape: []int64{1, 1, int64(T), 64}, DType: BFloat16, Bytes: int64(T) * 128}
		// The tensor's bytes: refs-1 one-byte blocks and the rest in a
		// last block of ones.
		for j := 0; j < refs; j++ {
			s.Blocks = append(s.Blocks, BlockRef{Hash: strings.Clone(hash), Bytes: 1})
		}
		return s
	}
	blocks := memBlocks{hash: blk}
	e := CacheEntry{Kind: KindKV, Offset: int64(T), Tensors: []Slot{full(), full()}}
	for k := range e.Tensors {
		rest := e.Tensors[k].Bytes - int64(refs-1)
		last := bytes.Repeat([]byte{1}, int(rest))
		ls := sha256.Sum256(last)
		lh := hex.EncodeToString(ls[:])
		blocks[lh] = last
		e.Tensors[k].Blocks[refs-1] = BlockRef{Hash: lh, Bytes: rest}
	}
	h.Caches = append(h.Caches, e)
	return &Snapshot{Name: "hostile.mlxkv", Header: h}, blocks
}

// allocBytes is the memory f allocates.
func allocBytes(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestWholeViewLinearInSlots: resolving a snapshot of many empty tensors
// costs in proportion to them. Listing the header's slots once per slot
// made ten times the tensors cost a hundred times the work (and 100,000
// of them minutes of CPU); the memory allocated measures it without a
// clock.
func TestWholeViewLinearInSlots(t *testing.T) {
	cost := func(pad int) uint64 {
		s, blocks := hostileSnapshot(pad, 16, 4)
		return allocBytes(func() {
			if _, err := NewWholeView(context.Background(), s, blocks); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := cost(1000), cost(10000)
	if ratio := float64(large) / float64(small); ratio > 20 {
		t.Errorf("10x the tensors allocate %.0fx the memory (%d vs %d bytes): not linear", ratio, large, small)
	}
}

// walkPieces is the reference mapping: every byte's source, one at a time
// through all tensors and blocks.
func walkPieces(v *WholeView, off, n int64) []Piece {
	var out []Piece
	add := func(p Piece) {
		if k := len(out) - 1; k >= 0 && out[k].Zero == p.Zero && out[k].Block == p.Block &&
			out[k].FileOff+out[k].Len == p.FileOff && (p.Block == "" || out[k].BlockOff+out[k].Len == p.BlockOff) &&
			(p.Block != "" || p.Zero == out[k].Zero) {
			out[k].Len++
			return
		}
		out = append(out, p)
	}
	for o := off; o < min(off+n, v.Size); o++ {
		if o < int64(len(v.Prefix)) {
			add(Piece{FileOff: o, Len: 1})
			continue
		}
		p := Piece{FileOff: o, Len: 1, Zero: true}
		for _, sl := range v.Slots {
			if o >= sl.Off && o < sl.Off+sl.Bytes {
				pos := sl.Off
				for _, b := range sl.Blocks {
					if o < pos+b.Bytes {
						p = Piece{FileOff: o, Len: 1, Block: b.Hash, BlockOff: o - pos}
						break
					}
					pos += b.Bytes
				}
			}
		}
		add(p)
	}
	return out
}

// TestPiecesBinarySearch: Pieces, which finds its first tensor and block
// by binary search, maps every range as a byte-by-byte walk does.
func TestPiecesBinarySearch(t *testing.T) {
	s, blocks := hostileSnapshot(3, 64, 100)
	v, err := NewWholeView(context.Background(), s, blocks)
	if err != nil {
		t.Fatal(err)
	}
	var pre int64 = int64(len(v.Prefix))
	for _, r := range [][2]int64{{0, 10}, {pre - 5, 10}, {pre, 1}, {pre + 50, 200}, {pre + 99, 2}, {pre, v.Size}, {v.Size - 7, 100}, {v.Size, 5}, {pre + 8191, 8195}} {
		got, want := v.Pieces(r[0], r[1]), walkPieces(v, r[0], r[1])
		// Blocks of one byte make one piece each in both; merge
		// nothing but adjacent prefix or zero runs.
		if len(got) != len(want) {
			t.Fatalf("Pieces(%d, %d): %d pieces, want %d\n%v\n%v", r[0], r[1], len(got), len(want), got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Pieces(%d, %d)[%d] = %+v, want %+v", r[0], r[1], i, got[i], want[i])
			}
		}
	}
}

// TestWholeViewMemBytes: MemBytes, by which the view cache weighs views,
// is within a factor of two of the heap a view of 65,536 block references
// keeps (its block list and hashes, far more than its prefix).
func TestWholeViewMemBytes(t *testing.T) {
	const n = 4
	var views []*WholeView
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	for i := 0; i < n; i++ {
		s, blocks := hostileSnapshot(0, 256, 32768)
		v, err := NewWholeView(context.Background(), s, blocks)
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	runtime.GC()
	runtime.ReadMemStats(&b)
	kept := float64(b.HeapAlloc-a.HeapAlloc) / n
	est := float64(views[0].MemBytes())
	if est < kept/2 || est > kept*2 {
		t.Errorf("MemBytes %.0f, measured %.0f bytes per view", est, kept)
	}
	t.Logf("MemBytes %.0f, measured %.0f bytes per view", est, kept)
	runtime.KeepAlive(views)
}
