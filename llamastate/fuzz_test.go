package llamastate_test

import (
	"bytes"
	"testing"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// FuzzParse: a parse of hostile bytes fails or returns blocks that lie in
// order inside the file and end it, and a trimmed view of it is refused or
// reads within it; it never panics or reads out of bounds. The seed corpus (testdata/fuzz/FuzzParse) holds small files of
// every shape.
func FuzzParse(f *testing.F) {
	for _, s := range specs {
		f.Add(llamastatetest.Write(s, tokens(3)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := llamastate.Parse(bytes.NewReader(b), int64(len(b)), "fuzz")
		if err != nil {
			return
		}
		checkCover(t, st)
		_ = st.Key()
		// A trimmed view of a hostile file is refused or reads within
		// the original.
		for _, n := range []int64{1, int64(len(st.Tokens)) / 2, int64(len(st.Tokens))} {
			v, err := llamastate.Trim(st, bytes.NewReader(b), n)
			if err != nil {
				continue
			}
			buf := make([]byte, v.Size)
			if _, err := v.ReadAt(bytes.NewReader(b), buf, 0); err != nil {
				t.Fatalf("view @%d of a parsed file: %v", n, err)
			}
		}
	})
}

// FuzzHead: the head and walk of hostile bytes, read as a file being
// written, fail or return blocks in order, each after its header and
// within the bytes given; they never panic or loop. The seed corpus
// (testdata/fuzz/FuzzHead) holds small files of every shape.
func FuzzHead(f *testing.F) {
	for _, s := range specs {
		f.Add(llamastatetest.Write(s, tokens(3)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		src := bytes.NewReader(b)
		h, err := llamastate.ParseHead(src, int64(len(b)))
		if err != nil {
			return
		}
		_ = h.KeyPrefix()
		w := h.Walk()
		pos := h.K0.Off
		for i := 0; ; i++ {
			blk, ok, err := w.Next(src, int64(len(b)))
			if err != nil || !ok {
				return
			}
			if i > 2*int(h.Layers) || blk.Off < pos || blk.Off > int64(len(b)) || blk.Rows < 0 || blk.RowBytes < 0 {
				t.Fatalf("block %d: %+v after %d of %d", i, blk, pos, len(b))
			}
			pos = blk.End()
		}
	})
}
