package mlx

import (
	"context"
	"io"
	"testing"
)

// fuzzViewSource serves the fuzz file as the snapshot's own bytes and zeros of
// any requested size for blocks.
type fuzzViewSource struct{ f fuzzFile }

func (s fuzzViewSource) OpenSource(block string) (io.ReaderAt, int64, error) {
	if block == "" {
		return s.f, s.f.size(), nil
	}
	return fuzzFile{nil, 1 << 16}, 1 << 16, nil
}

// FuzzPrefixView: a parsed header of any shape must not make
// NewPrefixView or ChainKeys panic, and a made view must cover its size.
func FuzzPrefixView(f *testing.F) {
	f.Fuzz(func(t *testing.T, head []byte, tail int64, n int64) {
		file := newFuzzFile(head, tail, true)
		s, err := Parse(file, file.size(), "fuzz.mlxkv")
		if err != nil {
			return
		}
		_ = ChainKeys(s.Header.ModelID, s.Header.ConfigFingerprint, s.Header.NS, s.Header.Tokens)
		_ = Trimmable(s.Header)
		_ = MinReusable(s.Header)
		v, err := NewPrefixView(context.Background(), s, n, fuzzViewSource{file})
		if err != nil {
			return
		}
		var sum int64
		for _, p := range v.Pieces(0, v.Size) {
			sum += p.Len
		}
		if sum != v.Size {
			t.Fatalf("pieces cover %d of %d", sum, v.Size)
		}
	})
}
