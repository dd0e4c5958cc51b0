package llamastate_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

func tokens(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i*7 + 3)
	}
	return t
}

var specs = map[string]llamastatetest.Spec{
	"seq fa":        {Layers: 3, KRow: 256, FlashAttn: true},
	"seq trans":     {Layers: 3, KRow: 256, VEl: 2, VChannels: 128},
	"session fa":    {Session: true, Arch: "llama", Layers: 2, KRow: 64, FlashAttn: true},
	"session trans": {Session: true, Arch: "llama", Layers: 2, KRow: 64, VEl: 2, VChannels: 32},
	"ext":           {Layers: 2, KRow: 64, FlashAttn: true, Ext: true},
	"swa":           {Layers: 2, KRow: 64, VEl: 2, VChannels: 32, Caches: 2},
}

// checkCover checks that a parsed file's blocks lie in order, each after
// the one before, inside the file (an empty stream's 8 bytes may follow
// the last).
func checkCover(t *testing.T, f *llamastate.File) {
	t.Helper()
	pos := f.DataStart()
	for i, b := range f.Blocks() {
		if b.Off < pos || b.Rows <= 0 || b.RowBytes <= 0 {
			t.Fatalf("block %d: %+v after %d", i, b, pos)
		}
		pos = b.End()
	}
	if pos > f.Size {
		t.Fatalf("blocks end at %d of %d", pos, f.Size)
	}
}

func TestParse(t *testing.T) {
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{1, 5, 300} {
				b := llamastatetest.Write(s, tokens(n))
				f, err := llamastate.Parse(bytes.NewReader(b), int64(len(b)), name)
				if err != nil {
					t.Fatalf("%d tokens: %v", n, err)
				}
				checkCover(t, f)
				if len(f.Tokens) != n || f.Tokens[n-1] != tokens(n)[n-1] || f.Arch != s.Arch {
					t.Fatalf("%d tokens: read %d, arch %q", n, len(f.Tokens), f.Arch)
				}
				caches := max(s.Caches, 1)
				if len(f.Caches) != caches {
					t.Fatalf("%d caches, want %d", len(f.Caches), caches)
				}
				st := f.Caches[0].Streams[0]
				if int(st.Cells) != n || st.Ext != s.Ext || st.VTrans == s.FlashAttn || len(st.K) != s.Layers || len(st.V) != s.Layers {
					t.Fatalf("stream %+v", st)
				}
				k := st.K[1]
				if k.Width != uint64(s.KRow) || k.Rows != 1 || k.RowBytes != int64(n*s.KRow) {
					t.Fatalf("K block %+v", k)
				}
				// The second layer's K rows are the writer's.
				if want := llamastatetest.Write(s, tokens(n)); !bytes.Equal(b[k.Off:k.End()], want[k.Off:k.End()]) {
					t.Fatal("not deterministic")
				}
				v := st.V[0]
				if !s.FlashAttn && (v.Rows != int64(s.VChannels) || v.RowBytes != int64(n*s.VEl) || v.Channels != uint32(s.VChannels)) {
					t.Fatalf("transposed V block %+v", v)
				}
			}
		})
	}
}

// TestKey: files of one model differ in key only by shape, not by length.
func TestKey(t *testing.T) {
	key := func(s llamastatetest.Spec, n int) string {
		b := llamastatetest.Write(s, tokens(n))
		f, err := llamastate.Parse(bytes.NewReader(b), int64(len(b)), "")
		if err != nil {
			t.Fatal(err)
		}
		return f.Key()
	}
	s := specs["seq trans"]
	if key(s, 10) != key(s, 700) {
		t.Fatal("the key depends on the token count")
	}
	other := s
	other.VChannels = 64
	fa := s
	fa.FlashAttn = true
	if key(s, 10) == key(other, 10) || key(s, 10) == key(fa, 10) || key(s, 10) == key(specs["session trans"], 10) {
		t.Fatal("different shapes share a key")
	}
	if !strings.HasPrefix(key(s, 1), "llama:") {
		t.Fatal("key not marked as llama.cpp's")
	}
}

// TestParseRefuses: anything but a whole state file is refused with an
// error, never a layout that does not cover the file.
func TestParseRefuses(t *testing.T) {
	good := llamastatetest.Write(specs["seq trans"], tokens(40))
	le := binary.LittleEndian
	cases := map[string][]byte{
		"empty":       nil,
		"short magic": good[:6],
		"other magic": append([]byte("GGUF"), good[4:]...),
		"old version": func() []byte { b := bytes.Clone(good); le.PutUint32(b[4:], 2); return b }(),
		"truncated":   good[:len(good)-1],
		"extra byte":  append(bytes.Clone(good), 0),
		"no cache":    good[:12+4*40],
		"huge tokens": func() []byte { b := bytes.Clone(good); le.PutUint32(b[8:], 1<<31); return b }(),
		"huge cells": func() []byte {
			b := bytes.Clone(good)
			le.PutUint32(b[12+4*40+4:], 1<<30)
			return b
		}(),
		"zero streams": func() []byte { b := bytes.Clone(good); le.PutUint32(b[12+4*40:], 0); return b }(),
	}
	for name, b := range cases {
		if f, err := llamastate.Parse(bytes.NewReader(b), int64(len(b)), "x"); err == nil {
			t.Errorf("%s: parsed: %+v", name, f)
		}
	}
	if llamastate.Sniff(good[:7]) || !llamastate.Sniff(good) {
		t.Fatal("Sniff")
	}
}
