package llamastate_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// TestTrim: a file cut to its first n tokens is, byte for byte, the file
// of the first n tokens, in every shape a sequence's save takes; read at
// unaligned offsets across runs.
func TestTrim(t *testing.T) {
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			full := llamastatetest.Write(s, tokens(300))
			f, err := llamastate.Parse(bytes.NewReader(full), int64(len(full)), name)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int64{1, 7, 299, 300} {
				v, err := llamastate.Trim(f, bytes.NewReader(full), n)
				if s.Caches == 2 {
					if !errors.Is(err, llamastate.ErrNotTrimmable) {
						t.Fatalf("two caches trimmed: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				want := llamastatetest.Write(s, tokens(300)[:n])
				if v.Size != int64(len(want)) {
					t.Fatalf("@%d: %d bytes, want %d", n, v.Size, len(want))
				}
				got := make([]byte, v.Size)
				for off := int64(0); off < v.Size; {
					k := min(v.Size-off, 1+(off*7919)%9973)
					if _, err := v.ReadAt(bytes.NewReader(full), got[off:off+k], off); err != nil {
						t.Fatal(err)
					}
					off += k
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("@%d: differs from the file of %d tokens", n, n)
				}
			}
			for _, n := range []int64{0, 301} {
				if _, err := llamastate.Trim(f, bytes.NewReader(full), n); !errors.Is(err, llamastate.ErrNotTrimmable) {
					t.Fatalf("@%d: %v", n, err)
				}
			}
		})
	}
}
