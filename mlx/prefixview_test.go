package mlx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// dirSource serves a fixture's own file and its blocks/ directory.
type dirSource struct{ file, dir string }

func (d dirSource) OpenSource(block string) (io.ReaderAt, int64, error) {
	p := d.file
	if block != "" {
		p = filepath.Join(d.dir, "blocks", block)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, 0, err
	}
	return bytes.NewReader(b), int64(len(b)), nil
}

// render reads a whole view through Pieces, in odd-sized reads.
func render(t *testing.T, v *PrefixView, src ViewSource) []byte {
	t.Helper()
	var out []byte
	for off := int64(0); off < v.Size; off += 12345 {
		for _, p := range v.Pieces(off, 12345) {
			b := make([]byte, p.Len)
			switch {
			case p.Prefix:
				copy(b, v.Prefix[p.FileOff:])
			case p.Zero:
			default:
				r, _, err := src.OpenSource(p.Block)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.ReadAt(b, p.SrcOff); err != nil {
					t.Fatal(err)
				}
			}
			out = append(out, b...)
		}
	}
	return out
}

// TestPrefixViewFixture cuts the engine's 400-token snapshot to 300 tokens,
// from either layout, and compares the view byte for byte with the
// engine's own whole-layout 300-token file.
func TestPrefixViewFixture(t *testing.T) {
	want := readFile(t, fixturePath("whole", 300))
	for _, layout := range []string{"whole", "blocks"} {
		path := fixturePath(layout, 400)
		s, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		src := dirSource{file: path, dir: filepath.Dir(path)}
		v, err := NewPrefixView(context.Background(), s, 300, src)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(t, v, src); !bytes.Equal(got, want) {
			t.Errorf("%s: 300-token view of the 400-token snapshot differs from the engine's 300-token file", layout)
		}
		if _, err := NewPrefixView(context.Background(), s, 401, src); !errors.Is(err, ErrNotTrimmable) {
			t.Errorf("%s: 401 tokens: err = %v, want ErrNotTrimmable", layout, err)
		}
	}
}
