package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/safetensors/safetensorstest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestCutAsTheStoreCuts: store.Cut, given the parent the store chose,
// cuts every file of a series exactly as the store's commit did (its
// chunks are the store's extents, a zero run cut every C bytes), for
// each format the store parses and for bytes of none; and it tells each
// file's lineage. A pool that publishes with Cut therefore stores a
// series as a local store does (issue 30).
func TestCutAsTheStoreCuts(t *testing.T) {
	const C = 64 << 10
	tiny := snapgen.Model{ID: "test/cut", Layers: 3, KVHeads: 2, HeadDim: 64, DType: snapgen.Tiny.DType}
	base := snapgen.Tokens(6000, 30)
	var mlxkv [][]byte
	for _, n := range []int{700, 1500, 2600, 4000, 6000} {
		mlxkv = append(mlxkv, snapshotOf(t, tiny, base[:n]))
	}
	mlxkv = append(mlxkv, snapshotOf(t, tiny, snapgen.Extend(base[:2000], 3000, 31))) // a branch
	fa, _ := llamastatetest.Series(llamastatetest.Spec{Layers: 3, KRow: 256, FlashAttn: true})
	vt, _ := llamastatetest.Series(llamastatetest.Spec{Layers: 3, KRow: 256, VEl: 2, VChannels: 128})
	var st [][]byte
	for _, n := range []int{300, 900, 1700} {
		st = append(st, safetensorstest.PromptCache(safetensorstest.Spec{Layers: 2, Heads: 2, HeadDim: 64}, base[:n]))
	}
	r := rand.New(rand.NewPCG(30, 30))
	plain := make([]byte, 3<<20)
	for i := range plain {
		plain[i] = byte(r.Uint32())
	}
	var shifted [][]byte
	for _, k := range []int{0, 1, 4095} {
		b := append(bytes.Repeat([]byte{7}, k), plain...)
		copy(b[1<<20:], make([]byte, 300<<10)) // a hole
		shifted = append(shifted, b)
	}
	for _, tc := range []struct {
		name, kind string
		files      [][]byte
		ext        string
	}{
		{"mlxkv", "mlxkv", mlxkv, ".mlxkv"},
		{"llama flash attention", "llama", fa[:6], ".bin"},
		{"llama transposed V", "llama", vt[:6], ".bin"},
		{"safetensors", "safetensors", st, ".safetensors"},
		{"plain", "plain", shifted, ".bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t, storetest.Options{ChunkSize: C})
			parents := 0
			for i, b := range tc.files {
				path := fmt.Sprintf("d/f%d%s", i, tc.ext)
				info, ps, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), path, store.PutOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if ps.Kind != tc.kind {
					t.Fatalf("%s stored as %q (%s)", path, ps.Kind, ps.Note)
				}
				f, want, err := store.FileExtents(s, info.Ino)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				asked := false
				opt := store.CutOptions{ChunkSize: C, Path: path, Parent: func(l store.Lineage) *store.CutParent {
					asked = true
					if ps.Parent == 0 {
						return nil
					}
					pf, pm, err := store.FileExtents(s, ps.Parent)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { pf.Close() })
					cp := &store.CutParent{Path: "parent" + tc.ext, Src: pf, Size: pf.Size()}
					for _, e := range pm {
						if !e.Zero {
							cp.Chunks = append(cp.Chunks, store.Chunk{Len: e.Len, Sum: e.ID})
							continue
						}
						for o := int64(0); o < e.Len; o += C { // as Cut cuts a zero run
							n := min(C, e.Len-o)
							cp.Chunks = append(cp.Chunks, store.Chunk{Len: n, Sum: blockstore.Sum(make([]byte, n))})
						}
					}
					parents++
					return cp
				}}
				var got []store.Chunk
				lin, err := store.Cut(context.Background(), bytes.NewReader(b), int64(len(b)), opt, func(cs []store.Chunk, base int64, data []byte) error {
					for _, c := range cs {
						if blockstore.Sum(data[c.Off-base:c.Off-base+c.Len]) != c.Sum {
							t.Fatalf("chunk at %d: sum is not its bytes'", c.Off)
						}
					}
					got = append(got, cs...)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if lin.Kind != tc.kind || (tc.kind == "plain") != (lin.Layout == "") || (tc.kind != "plain") != asked {
					t.Fatalf("%s: lineage %q %q (parent asked: %v)", path, lin.Kind, lin.Layout, asked)
				}
				var off int64
				k := 0
				for j, e := range want {
					for o := int64(0); o < e.Len; {
						if k >= len(got) {
							t.Fatalf("%s: Cut gave %d chunks; the store's extent %d is not covered", path, len(got), j)
						}
						c := got[k]
						n := e.Len - o
						if e.Zero {
							n = min(n, C)
						}
						if c.Off != off || c.Len != n || !e.Zero && c.Sum != e.ID {
							t.Fatalf("%s: chunk %d [%d,+%d) is not the store's extent %d [%d,+%d) (zero %v)", path, k, c.Off, c.Len, j, off, n, e.Zero)
						}
						off += n
						o += n
						k++
					}
				}
				if k != len(got) || off != int64(len(b)) {
					t.Fatalf("%s: Cut gave %d chunks to %d, the store %d to %d", path, len(got), off, k, len(b))
				}
			}
			if tc.kind != "plain" && parents < len(tc.files)-2 {
				t.Fatalf("only %d of %d files had a parent", parents, len(tc.files))
			}
		})
	}
}

// TestCutRefuses: a source shorter than its size is an error naming the
// file (ErrShortSource), never chunks of stale bytes; a chunk size out of
// range is refused; fn's error stops the cut.
func TestCutRefuses(t *testing.T) {
	b := bytes.Repeat([]byte("kvfs"), 100_000)
	_, err := store.Cut(context.Background(), bytes.NewReader(b[:1000]), int64(len(b)), store.CutOptions{Path: "short.bin"},
		func([]store.Chunk, int64, []byte) error { return nil })
	if !errors.Is(err, store.ErrShortSource) || !bytes.Contains([]byte(err.Error()), []byte("short.bin")) {
		t.Fatalf("short source: %v", err)
	}
	if _, err := store.Cut(context.Background(), bytes.NewReader(b), int64(len(b)), store.CutOptions{ChunkSize: 100},
		func([]store.Chunk, int64, []byte) error { return nil }); err == nil {
		t.Fatal("a chunk size of 100 bytes was accepted")
	}
	stop := errors.New("stop")
	if _, err := store.Cut(context.Background(), bytes.NewReader(b), int64(len(b)), store.CutOptions{},
		func([]store.Chunk, int64, []byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := store.Cut(ctx, bytes.NewReader(b), int64(len(b)), store.CutOptions{},
		func([]store.Chunk, int64, []byte) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// snapshotOf is a whole-layout snapshot of tokens, of model m.
func snapshotOf(t *testing.T, m snapgen.Model, tokens []uint32) []byte {
	t.Helper()
	b, err := m.Bytes(tokens)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
