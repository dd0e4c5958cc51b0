package mlx

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The fixtures under testdata/mlxbun were written by the engine's own
// persistence worker (FORMAT.md §9). fixtureGen regenerates their inputs.

const (
	fixtureDir       = "testdata/mlxbun"
	fixtureCapacity  = 512 // tokens in each capacity buffer
	fixtureHeads     = 8
	fixtureHeadDim   = 64
	fixtureBlockSize = 16384
)

// xorshiftBytes returns n bytes of the fixtures' data stream: xorshift32
// with shifts 13/17/5, one step per byte, keeping the low byte.
func xorshiftBytes(seed uint32, n int) []byte {
	b := make([]byte, n)
	x := seed
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func fixtureTokens(t int) []uint32 {
	out := make([]uint32, t)
	for i := range out {
		out[i] = uint32((i*7919 + 3) % 32000)
	}
	return out
}

// fixtureSnapshot returns the header and tensors the fixture of T tokens was
// written from: layer 0 contiguous copies of the first T tokens, layer 1
// strided views into the 512-token capacity buffers.
func fixtureSnapshot(T int) (*Header, []Tensor) {
	h := &Header{
		CreatedAt:         1767225600000,
		ModelID:           "fixture/tiny-kv",
		ConfigFingerprint: "fixture-fingerprint",
		TokenizerHash:     "fixture-tokenizer",
		NS:                "",
		CodecProvider:     DefaultCodecProvider,
		Tokens:            fixtureTokens(T),
	}
	shape := []int64{1, fixtureHeads, int64(T), fixtureHeadDim}
	var tensors []Tensor
	for layer, seeds := range [][2]uint32{{0x1001, 0x1002}, {0x2001, 0x2002}} {
		e := CacheEntry{Kind: KindKV, Offset: int64(T)}
		for _, seed := range seeds {
			capBuf := xorshiftBytes(seed, fixtureHeads*fixtureCapacity*fixtureHeadDim*2)
			strided := Tensor{Data: capBuf, Shape: shape, DType: BFloat16,
				Strides: []int64{fixtureHeads * fixtureCapacity * fixtureHeadDim, fixtureCapacity * fixtureHeadDim, fixtureHeadDim, 1}}
			if layer == 0 {
				l, err := strided.prepare()
				if err != nil {
					panic(err)
				}
				var scratch []byte
				b, _ := l.span(0, l.size, &scratch)
				strided = Contiguous(bytes.Clone(b), BFloat16, shape...)
			}
			tensors = append(tensors, strided)
			e.Tensors = append(e.Tensors, Slot{Shape: shape, DType: BFloat16})
		}
		h.Caches = append(h.Caches, e)
	}
	return h, tensors
}

func fixturePath(layout string, T int) string {
	name := map[int]string{300: "00000000-0000-4000-8000-000000000300.mlxkv", 400: "00000000-0000-4000-8000-000000000400.mlxkv"}[T]
	return filepath.Join(fixtureDir, layout, "fixture-fingerprint", "base", name)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func compareFiles(t *testing.T, got, want string) {
	t.Helper()
	g, w := readFile(t, got), readFile(t, want)
	if !bytes.Equal(g, w) {
		n := 0
		for n < min(len(g), len(w)) && g[n] == w[n] {
			n++
		}
		t.Errorf("%s differs from %s: sizes %d and %d, first difference at byte %d", got, want, len(g), len(w), n)
	}
}

// TestWriterReproducesFixtures regenerates every fixture file, both layouts
// and every block, and compares them byte for byte.
func TestWriterReproducesFixtures(t *testing.T) {
	dir := t.TempDir()
	// The engine's metrics when it wrote the fixtures, 300 first, into one
	// namespace directory (inventory.json).
	wantStats := map[int]WriteStats{
		300: {WrittenBytes: 1239745, ReusedBytes: 0},
		400: {WrittenBytes: 604216, ReusedBytes: 1048576},
	}
	for _, T := range []int{300, 400} {
		h, tensors := fixtureSnapshot(T)

		whole := filepath.Join(dir, "whole", filepath.Base(fixturePath("whole", T)))
		if _, _, err := (&Writer{}).Write(whole, h, tensors); err != nil {
			t.Fatal(err)
		}
		compareFiles(t, whole, fixturePath("whole", T))

		blocks := filepath.Join(dir, "blocks", filepath.Base(fixturePath("blocks", T)))
		w := &Writer{Layout: BlocksLayout, BlockBytes: fixtureBlockSize}
		_, st, err := w.Write(blocks, h, tensors)
		if err != nil {
			t.Fatal(err)
		}
		compareFiles(t, blocks, fixturePath("blocks", T))
		if st != wantStats[T] {
			t.Errorf("T=%d: blocks layout stats %+v, engine's %+v", T, st, wantStats[T])
		}
		entries, err := os.ReadDir(filepath.Join(dir, "blocks", "blocks"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			compareFiles(t, filepath.Join(dir, "blocks", "blocks", e.Name()), filepath.Join(filepath.Dir(fixturePath("blocks", T)), "blocks", e.Name()))
		}
		// 96 blocks for T=300, then 64 more for T=400 (64 are shared).
		if want := map[int]int{300: 96, 400: 160}[T]; len(entries) != want {
			t.Errorf("T=%d: %d blocks written, want %d", T, len(entries), want)
		}
	}
}
