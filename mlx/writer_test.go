package mlx

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSegmentsExample(t *testing.T) {
	// FORMAT.md §4.2: bf16, blockBytes 16384, D=64.
	for T, want := range map[int64][]int64{300: {16384, 16384, 5632}, 400: {16384, 16384, 16384, 2048}} {
		var got []int64
		for sp := range Segments([]int64{1, 2, T, 64}, 2, 16384) {
			got = append(got, sp.Count*2)
		}
		if !slices.Equal(got[:len(want)], want) || !slices.Equal(got[len(want):], want) {
			t.Errorf("T=%d: blocks %v, want %v twice", T, got, want)
		}
	}
	// Rank 0 is one element, rank 1 one row, and blockBytes below the item
	// size still makes progress one element at a time.
	count := func(shape []int64, item, bb int64) (n int) {
		for range Segments(shape, item, bb) {
			n++
		}
		return
	}
	if count(nil, 4, 1<<20) != 1 || count([]int64{10}, 4, 8) != 5 || count([]int64{3}, 8, 1) != 3 || count([]int64{2, 0, 5}, 2, 4) != 0 {
		t.Error("Segments edge cases")
	}
}

func rnd(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestWriterAllKinds writes a v4 snapshot with an entry of every kind and
// attachments in both layouts, parses it back, verifies it and compares
// every tensor with a reference gather.
func TestWriterAllKinds(t *testing.T) {
	h, tensors, want := allKinds(t)
	testWriteAllKinds(t, h, tensors, want)
}

func allKindsSnapshot(t *testing.T) (*Header, []Tensor) {
	h, tensors, _ := allKinds(t)
	return h, tensors
}

// allKinds builds a snapshot with an entry of every kind, strided and
// contiguous tensors, and attachments, with the expected tensor bytes.
func allKinds(t *testing.T) (*Header, []Tensor, [][]byte) {
	var tensors []Tensor
	var want [][]byte
	add := func(shape []int64, dtype DType, strided bool) Slot {
		n := prod(shape) * int64(dtype.Size())
		if !strided || len(shape) < 3 {
			b := rnd(int(n), uint64(len(tensors)))
			tensors = append(tensors, Contiguous(b, dtype, shape...))
			want = append(want, b)
			return Slot{Shape: shape, DType: dtype}
		}
		// A capacity buffer twice as long on axis -2, viewed strided.
		capShape := slices.Clone(shape)
		capShape[len(shape)-2] *= 2
		buf := rnd(int(prod(capShape))*dtype.Size(), uint64(len(tensors)))
		strides := make([]int64, len(shape))
		s := int64(1)
		for i := len(shape) - 1; i >= 0; i-- {
			strides[i] = s
			s *= capShape[i]
		}
		tn := Tensor{Data: buf, Shape: shape, Strides: strides, DType: dtype}
		tensors = append(tensors, tn)
		l, err := tn.prepare()
		if err != nil {
			t.Fatal(err)
		}
		var scratch []byte
		b, _ := l.span(0, l.size, &scratch)
		want = append(want, slices.Clone(b))
		return Slot{Shape: shape, DType: dtype}
	}
	entry := func(kind Kind, shapes ...[]int64) CacheEntry {
		e := CacheEntry{Kind: kind, Offset: 5}
		for i, s := range shapes {
			e.Tensors = append(e.Tensors, add(s, []DType{BFloat16, Uint32, Float16}[i%3], i%2 == 1))
		}
		return e
	}
	kv := []int64{1, 2, 5, 8}
	h := &Header{CreatedAt: 42, ModelID: "m", ConfigFingerprint: "fp", TokenizerHash: "th", NS: "french", Tokens: []uint32{1, 2, 3, 4, 5}}
	h.Caches = []CacheEntry{
		entry(KindKV, kv, kv),
		entry(KindQKV, kv, kv, kv, kv, kv, kv),
		entry(KindSSM, []int64{1, 3, 7}, []int64{1, 2, 4, 4}),
		entry(KindTurboQuant, kv, kv, kv, kv, kv),
		entry(KindMLA, []int64{1, 5, 16}, []int64{1, 5, 4}),
		entry(KindMLADSA, []int64{1, 5, 16}, []int64{1, 5, 4}, []int64{1, 5, 2}),
		entry(KindMTPMLA, []int64{1, 5, 16}, []int64{}),
		entry(KindRotating, kv, kv),
		entry(KindRotatingQKV, kv, kv, kv, kv, kv, kv),
		entry(KindPaged, []int64{2, 2, 4, 8}, []int64{2, 2, 4, 8}),
	}
	h.Caches[7].MaxSize, h.Caches[8].MaxSize = 8, 8
	h.Caches[9].Paged = &PagedLayout{BlockSize: 4, BlockTable: []int64{1, 0}, NumBlocks: 2}
	h.Attachments = []Attachment{{Schema: "spec", Metadata: Metadata{{"k", "v"}}, Tensors: []Slot{add([]int64{3}, Int8, false), add([]int64{0}, Float32, false)}}}
	return h, tensors, want
}

func testWriteAllKinds(t *testing.T, h *Header, tensors []Tensor, want [][]byte) {
	for _, w := range []*Writer{{}, {Layout: BlocksLayout, BlockBytes: 1000}, {Layout: BlocksLayout}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "ns", "s.mlxkv")
		out, st, err := w.Write(path, h, tensors)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s.Header, out) {
			for i := range out.Caches {
				if !reflect.DeepEqual(s.Header.Caches[i], out.Caches[i]) {
					t.Logf("cache %d: %+v vs %+v", i, s.Header.Caches[i], out.Caches[i])
				}
			}
			t.Fatalf("layout %d: parsed header differs from the written one", w.Layout)
		}
		wantVersion := map[Layout]int{WholeLayout: 4, BlocksLayout: 5}[w.Layout]
		if s.Header.FormatVersion != wantVersion || st.WrittenBytes == 0 {
			t.Fatalf("layout %d: version %d, stats %+v", w.Layout, s.Header.FormatVersion, st)
		}
		// The attachment quirk: the first attachment tensor starts at the
		// unaligned end of the last cache tensor.
		slots := s.Header.Slots()
		last, att := slots[len(slots)-3], slots[len(slots)-2]
		if att.Off != last.Off+last.Bytes || att.Off%Align == 0 || slots[len(slots)-1].Off != AlignUp(att.Off+att.Bytes) {
			t.Fatalf("attachment offsets %d, %d after cache tensor [%d,+%d)", att.Off, slots[len(slots)-1].Off, last.Off, last.Bytes)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Verify(context.Background(), f, BlockDir(filepath.Dir(path))); err != nil {
			t.Fatal(err)
		}
		_, got := slotBytes(t, path)
		for i := range want {
			if string(got[i]) != string(want[i]) {
				t.Fatalf("layout %d: slot %d reads back wrong", w.Layout, i)
			}
		}
		f.Close()
		leftovers, _ := filepath.Glob(filepath.Join(dir, "ns", "*.tmp"))
		more, _ := filepath.Glob(filepath.Join(dir, "ns", "blocks", "*.tmp"))
		if len(leftovers)+len(more) > 0 {
			t.Fatalf("tmp files left: %v %v", leftovers, more)
		}
	}
}

func TestWriterRejects(t *testing.T) {
	h, tensors := fixtureSnapshot(300)
	dir := t.TempDir()
	path := filepath.Join(dir, "x.mlxkv")
	bad := func(i int, f func(*Tensor)) []Tensor {
		out := slices.Clone(tensors)
		f(&out[i])
		return out
	}
	for name, ts := range map[string][]Tensor{
		"count":           tensors[:3],
		"shape":           bad(1, func(t *Tensor) { t.Shape = []int64{1, 8, 301, 64} }),
		"dtype":           bad(1, func(t *Tensor) { t.DType = Float16 }),
		"short buffer":    bad(0, func(t *Tensor) { t.Data = t.Data[:100] }),
		"strided short":   bad(2, func(t *Tensor) { t.Data = t.Data[:300000] }),
		"negative stride": bad(2, func(t *Tensor) { t.Strides = []int64{262144, 32768, -64, 1} }),
		"stride rank":     bad(2, func(t *Tensor) { t.Strides = []int64{1} }),
	} {
		for _, w := range []*Writer{{}, {Layout: BlocksLayout}} {
			if _, _, err := w.Write(path, h, ts); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: err = %v, want an error naming %s", name, err, path)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left %d entries", len(entries))
	}
	// A directory in the way of the tmp file: the write fails, cleanly.
	if err := os.Mkdir(path+".tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (&Writer{}).Write(path, h, tensors); err == nil {
		t.Error("write through a directory succeeded")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("failed write left %s", path)
	}
}
