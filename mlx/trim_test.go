package mlx

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// slotBytes reads every slot of a parsed fixture.
func slotBytes(t *testing.T, path string) (*Snapshot, [][]byte) {
	t.Helper()
	s, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	for i := range s.Header.Slots() {
		b, err := io.ReadAll(s.SlotReader(i, f, BlockDir(filepath.Dir(path))))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return s, out
}

// assemble builds the trimmed tensors from source slot bytes.
func assemble(tr *Trimmed, src [][]byte) []Tensor {
	var out []Tensor
	for i, s := range tr.Header.Slots() {
		var b []byte
		for _, e := range tr.Extents[i] {
			b = append(b, src[e.Slot][e.Off:e.Off+e.Len]...)
		}
		out = append(out, Contiguous(b, s.DType, s.Shape...))
	}
	return out
}

// TestTrimFixture cuts the engine's 400-token snapshot to 300 tokens and
// compares the result with the engine's own 300-token file: the tensors,
// and both layouts written from them, byte for byte.
func TestTrimFixture(t *testing.T) {
	for _, layout := range []string{"whole", "blocks"} {
		long, src := slotBytes(t, fixturePath(layout, 400))
		_, want := slotBytes(t, fixturePath(layout, 300))
		tr, err := Trim(long.Header, 300)
		if err != nil {
			t.Fatal(err)
		}
		tensors := assemble(tr, src)
		for i := range want {
			if !bytes.Equal(tensors[i].Data, want[i]) {
				t.Errorf("%s: trimmed slot %d differs from the engine's 300-token tensor", layout, i)
			}
		}
		// 8 heads per tensor, each cut from 400 to 300 rows: 8 extents.
		if len(tr.Extents[0]) != 8 || tr.Extents[0][1].Off != 400*64*2 || tr.Extents[0][1].Len != 300*64*2 {
			t.Errorf("%s: extents %+v", layout, tr.Extents[0])
		}
		if tr.Header.FormatVersion != 3 || tr.Header.Slots()[3].Off != 933888 {
			t.Errorf("%s: trimmed header not planned as the whole layout: %+v", layout, tr.Header.Slots()[3])
		}
		dir := t.TempDir()
		w := &Writer{}
		if layout == "blocks" {
			w = &Writer{Layout: BlocksLayout, BlockBytes: fixtureBlockSize}
		}
		out := filepath.Join(dir, "t.mlxkv")
		if _, _, err := w.Write(out, tr.Header, tensors); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, out); !bytes.Equal(got, readFile(t, fixturePath(layout, 300))) {
			t.Errorf("%s: trimmed snapshot written by Writer differs from the engine's 300-token file", layout)
		}
	}
}

func TestTrimKinds(t *testing.T) {
	kv := func(kind Kind, offset int64, shape ...int64) CacheEntry {
		return CacheEntry{Kind: kind, Offset: offset, Tensors: []Slot{
			{Shape: shape, DType: Float16, Bytes: prod(shape) * 2},
			{Shape: shape, DType: Float16, Bytes: prod(shape) * 2},
		}}
	}
	h := &Header{Tokens: make([]uint32, 10)}
	rot := kv(KindRotating, 10, 1, 2, 16, 4)
	rot.MaxSize, rot.Idx = 32, 10
	mla := CacheEntry{Kind: KindMLADSA, Offset: 10, Tensors: []Slot{
		{Shape: []int64{2, 10, 8}, DType: Float32, Bytes: 640},
		{Shape: []int64{2, 10, 4}, DType: Float32, Bytes: 320},
		{Shape: []int64{2, 10, 2}, DType: Float32, Bytes: 160},
	}}
	paged := kv(KindPaged, 10, 4, 2, 8, 4)
	paged.Paged = &PagedLayout{BlockSize: 8, BlockTable: []int64{3, 1}, NumBlocks: 4}
	h.Caches = []CacheEntry{kv(KindKV, 10, 1, 2, 10, 4), rot, mla, paged}
	tr, err := Trim(h, 4)
	if err != nil {
		t.Fatal(err)
	}
	c := tr.Header.Caches
	if c[0].Tensors[0].Shape[2] != 4 || c[1].Idx != 4 || c[1].Offset != 4 || c[1].Tensors[1].Shape[2] != 4 ||
		c[2].Tensors[2].Shape[1] != 4 || c[3].Offset != 4 || !reflect.DeepEqual(c[3].Tensors[0].Shape, []int64{4, 2, 8, 4}) {
		t.Fatalf("trimmed header: %+v", c)
	}
	wantExt := map[int][]Extent{
		0: {{0, 0, 32}, {0, 80, 32}},    // kv heads of 10x4 f16 = 80 bytes, keep 32
		2: {{2, 0, 32}, {2, 128, 32}},   // ring of 16 rows: 128 bytes per head
		4: {{4, 0, 128}, {4, 320, 128}}, // mla latent [2,10,8] f32, axis 1
		7: {{7, 0, 4 * 2 * 8 * 4 * 2}},  // paged pool kept whole
	}
	for i, want := range wantExt {
		if !reflect.DeepEqual(tr.Extents[i], want) {
			t.Errorf("extents of slot %d = %v, want %v", i, tr.Extents[i], want)
		}
	}
	if h.Caches[0].Tensors[0].Shape[2] != 10 || len(h.Tokens) != 10 {
		t.Fatal("Trim modified its input")
	}
	full, err := Trim(h, 10)
	if err != nil || len(full.Extents[0]) != 1 || full.Extents[0][0].Len != 160 {
		t.Fatalf("identity trim: %v %+v", err, full)
	}

	wrapped := rot
	wrapped.Offset, wrapped.MaxSize = 40, 16
	tq := kv(KindTurboQuant, 10, 1, 2, 10, 4)
	tq.Tensors = append(tq.Tensors, tq.Tensors[0], tq.Tensors[0], tq.Tensors[0])
	mro := kv(KindKV, 10, 1, 2, 10, 4)
	mro.MinimumReusableOffset = i64(6)
	for name, bad := range map[string]*Header{
		"ssm":        {Tokens: make([]uint32, 10), Caches: []CacheEntry{kv(KindSSM, 10, 1, 3, 8)}},
		"wrapped":    {Tokens: make([]uint32, 40), Caches: []CacheEntry{wrapped}},
		"attachment": {Tokens: make([]uint32, 10), Attachments: []Attachment{{}}},
		"checkpoint": {Tokens: make([]uint32, 10), GenerationCheckpoint: &GenerationCheckpoint{}},
		"turboquant": {Tokens: make([]uint32, 10), Caches: []CacheEntry{tq}},
		"below mro":  {Tokens: make([]uint32, 10), Caches: []CacheEntry{mro}},
		"past end":   {Tokens: make([]uint32, 3), Caches: []CacheEntry{kv(KindKV, 3, 1, 2, 3, 4)}},
		"short axis": {Tokens: make([]uint32, 10), Caches: []CacheEntry{kv(KindKV, 10, 1, 2, 5, 4)}},
		"low rank":   {Tokens: make([]uint32, 10), Caches: []CacheEntry{kv(KindKV, 10, 10)}},
	} {
		if _, err := Trim(bad, 4); !errors.Is(err, ErrNotTrimmable) {
			t.Errorf("%s: Trim err = %v, want ErrNotTrimmable", name, err)
		}
	}
	tq.MinimumReusableOffset = i64(0)
	if _, err := Trim(&Header{Tokens: make([]uint32, 10), Caches: []CacheEntry{tq}}, 4); err != nil {
		t.Errorf("turboquant with minimumReusableOffset 0: %v", err)
	}
}

func prod(shape []int64) int64 {
	n, _ := elements(shape)
	return n
}
