package llamastate_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

var le = binary.LittleEndian

// TestHeadWhileWritten reads every prefix of every shape's file as a file
// being written would be read: ParseHead says ErrShort until the first
// block's header is in, then gives the head the whole file's parse has,
// and a Walk, fed a growing prefix, returns the first stream's blocks, each
// once its header is in, and no more. (A file with 2D-position cells is
// read as the common layout, which its blocks do not follow.)
func TestHeadWhileWritten(t *testing.T) {
	for name, s := range specs {
		if s.Ext {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := llamastatetest.Write(s, tokens(37))
			src := bytes.NewReader(b)
			f, err := llamastate.Parse(src, int64(len(b)), name)
			if err != nil {
				t.Fatal(err)
			}
			st := f.Caches[0].Streams[0]
			want := append(append([]llamastate.Block(nil), st.K...), st.V...)
			var h *llamastate.Head
			var w *llamastate.Walk
			var got []llamastate.Block
			for n := int64(0); n <= int64(len(b)); n++ {
				if h == nil {
					h, err = llamastate.ParseHead(src, n)
					if errors.Is(err, llamastate.ErrShort) {
						if n >= want[0].Off {
							t.Fatalf("short at %d, past the first block's header (%d)", n, want[0].Off)
						}
						h = nil
						continue
					}
					if err != nil {
						t.Fatalf("at %d: %v", n, err)
					}
					if n != want[0].Off {
						t.Fatalf("head at %d, want %d", n, want[0].Off)
					}
					if !slices.Equal(h.Tokens, f.Tokens) || h.Cells != st.Cells || h.VTrans != st.VTrans || int(h.Layers) != len(st.K) || h.K0 != st.K[0] {
						t.Fatalf("head %+v, file %+v", h, st)
					}
					if !strings.HasPrefix(f.Key(), h.KeyPrefix()) {
						t.Fatalf("key %s does not begin with the head's %s", f.Key(), h.KeyPrefix())
					}
					w = h.Walk()
				}
				for {
					blk, ok, err := w.Next(src, n)
					if err != nil {
						t.Fatalf("at %d: %v", n, err)
					}
					if !ok {
						break
					}
					if blk.Off > n {
						t.Fatalf("block %+v returned at %d, before its header is in", blk, n)
					}
					got = append(got, blk)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("walked %d blocks, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("block %d: %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestHeadRefuses: a head no state file has is an error, not ErrShort,
// however many bytes follow.
func TestHeadRefuses(t *testing.T) {
	good := llamastatetest.Write(specs["seq fa"], tokens(4))
	for name, mutate := range map[string]func([]byte){
		"magic":     func(b []byte) { b[0] ^= 1 },
		"streams 0": func(b []byte) { le.PutUint32(b[12+16:], 0) },
		"cells 0":   func(b []byte) { le.PutUint32(b[12+16+4:], 0) },
	} {
		b := bytes.Clone(good)
		mutate(b)
		_, err := llamastate.ParseHead(bytes.NewReader(b), int64(len(b)))
		if err == nil || errors.Is(err, llamastate.ErrShort) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
