package mlx

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWholeViewOfFixture: the engine's blocks-layout snapshots, resolved
// into the whole layout, are byte for byte the engine's whole-layout files.
func TestWholeViewOfFixture(t *testing.T) {
	for _, T := range []int{300, 400} {
		s, err := ReadFile(fixturePath("blocks", T))
		if err != nil {
			t.Fatal(err)
		}
		blocks := BlockDir(filepath.Dir(fixturePath("blocks", T)))
		v, err := NewWholeView(context.Background(), s, blocks)
		if err != nil {
			t.Fatal(err)
		}
		want := readFile(t, fixturePath("whole", T))
		if v.Size != int64(len(want)) {
			t.Fatalf("T=%d: size %d, want %d", T, v.Size, len(want))
		}
		// Assemble the file from pieces of odd sizes.
		var got []byte
		for off := int64(0); off < v.Size; off += 77777 {
			for _, p := range v.Pieces(off, 77777) {
				switch {
				case p.Zero:
					got = append(got, make([]byte, p.Len)...)
				case p.Block == "":
					got = append(got, v.Prefix[p.FileOff:p.FileOff+p.Len]...)
				default:
					f, err := os.Open(filepath.Join(string(blocks), "blocks", p.Block))
					if err != nil {
						t.Fatal(err)
					}
					b := make([]byte, p.Len)
					if _, err := f.ReadAt(b, p.BlockOff); err != nil && err != io.EOF {
						t.Fatal(err)
					}
					f.Close()
					got = append(got, b...)
				}
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("T=%d: resolved whole file differs from the engine's", T)
		}
	}
	whole, _ := ReadFile(fixturePath("whole", 300))
	if _, err := NewWholeView(context.Background(), whole, nil); err == nil {
		t.Fatal("resolved a whole-layout file")
	}
}
