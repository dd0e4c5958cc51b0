package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// snapshotBytes is a whole-layout snapshot of tokens, Llama-3-8B-shaped.
func snapshotBytes(t *testing.T, tokens []uint32) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.mlxkv")
	if err := snapgen.Llama3_8B.WriteFile(path, tokens); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// piecesOf runs plan to the end of b, in steps as a writer's, and returns
// its pieces summed. Each step yields only pieces written by then.
func piecesOf(t *testing.T, plan *store.PiecePlan, b []byte, step int64) []store.Piece {
	t.Helper()
	var out []store.Piece
	for upto := min(step, int64(len(b))); ; upto = min(upto+step, int64(len(b))) {
		for {
			off, n, ok := plan.Next(upto)
			if !ok {
				break
			}
			if off+n > upto {
				t.Fatalf("piece [%d,+%d) yielded with %d bytes written", off, n, upto)
			}
			if len(out) > 0 && off < out[len(out)-1].Off+out[len(out)-1].N {
				t.Fatalf("piece [%d,+%d) overlaps or precedes the one before", off, n)
			}
			out = append(out, store.Piece{Off: off, N: n, Sum: blockstore.Sum(b[off : off+n]), Summed: true})
		}
		if upto == int64(len(b)) {
			return out
		}
	}
}

// TestSnapshotPieces: the plan of a snapshot's chunks, made from its
// header while it is written, is the commit's: a new snapshot committed
// with the sums of its pieces hashes nothing, whether it has a parent
// whose rows it reuses or not, and reads back exactly (the store's check
// verifies every chunk against its ID). A header not yet written asks for
// more; a format-5 manifest, a header over the caps and bytes that are no
// snapshot get no plan.
func TestSnapshotPieces(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: store.DefaultChunkSize})
	base := snapgen.Tokens(300, 1) // rows of 75 KiB: a chunk and a tail
	for k, tokens := range [][]uint32{base, snapgen.Extend(base, 500, 2)} {
		b := snapshotBytes(t, tokens)
		var p mlx.Prefix
		if err := p.UnmarshalBinary(b[:mlx.PrefixLen]); err != nil {
			t.Fatal(err)
		}
		headerEnd := int64(mlx.PrefixLen) + int64(p.HeaderLen)
		for _, n := range []int64{0, mlx.PrefixLen - 1, mlx.PrefixLen, headerEnd - 1} {
			if _, err := s.SnapshotPieces(bytes.NewReader(b[:n]), n); !errors.Is(err, store.ErrMorePieces) {
				t.Fatalf("%d bytes of a %d-byte header written: %v, want ErrMorePieces", n, headerEnd, err)
			}
		}
		plan, err := s.SnapshotPieces(bytes.NewReader(b[:headerEnd]), headerEnd)
		if err != nil {
			t.Fatal(err)
		}
		pieces := piecesOf(t, plan, b, 100_003)
		var covered int64
		for _, pc := range pieces {
			covered += pc.N
		}
		if covered < int64(len(b))*9/10 {
			t.Fatalf("pieces cover %d of %d bytes", covered, len(b))
		}
		fi, err := s.CreateAt(1, "s"+string(rune('0'+k))+".mlxkv", 0o644, store.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		f := changeSpool(t, s, b, nil)
		if _, err := f.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		_, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: int64(len(b)), Spool: f, Pieces: pieces}, nil, store.CommitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind != "mlxkv" || st.HashedBytes != 0 || k == 1 && st.ParentReused == 0 {
			t.Fatalf("snapshot %d: stats %+v: want a snapshot, nothing hashed, rows of the parent reused by the second", k, st)
		}
		if got := get(t, s, "s"+string(rune('0'+k))+".mlxkv"); !bytes.Equal(got, b) {
			t.Fatalf("snapshot %d reads back wrong", k)
		}
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}

	manifest, err := os.ReadFile(filepath.Join(fixtures, "blocks/fixture-fingerprint/base/00000000-0000-4000-8000-000000000400.mlxkv"))
	if err != nil {
		t.Fatal(err)
	}
	capped := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{MaxSnapshotTokens: 100}})
	for _, c := range []struct {
		name string
		s    *store.Store
		b    []byte
	}{
		{"format-5 manifest", s, manifest},
		{"over the token cap", capped, snapshotBytes(t, snapgen.Tokens(101, 3))},
		{"not a snapshot", s, bytes.Repeat([]byte("not a snapshot "), 1000)},
	} {
		if _, err := c.s.SnapshotPieces(bytes.NewReader(c.b), int64(len(c.b))); err == nil || errors.Is(err, store.ErrMorePieces) {
			t.Errorf("%s: %v, want an error", c.name, err)
		}
	}
}

// FuzzSnapshotPieces: whatever the first bytes of a .mlxkv being written,
// planning its pieces returns (an error, or a plan) and the plan yields,
// for any amount written, pieces in file order, within what was written,
// none empty or longer than a chunk, and not many more than a piece per
// chunk written (a row yields at most a chunk and a tail per chunk, the
// header one per chunk).
func FuzzSnapshotPieces(f *testing.F) {
	tiny := filepath.Join(f.TempDir(), "t.mlxkv")
	if err := snapgen.Tiny.WriteFile(tiny, snapgen.Tokens(70, 1)); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(tiny)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, int64(len(b)))
	f.Add(b[:200], int64(200))
	f.Add(b, int64(5000))
	f.Add([]byte("MLXKV"), int64(5))
	s := storetest.New(f, storetest.Options{ChunkSize: 4096})
	f.Fuzz(func(t *testing.T, b []byte, upto int64) {
		plan, err := s.SnapshotPieces(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		upto = max(0, min(upto, 1<<30))
		checkPlanned(t, plan, upto, 2*upto/4096+int64(len(b))/4096+4)
	})
}

// checkPlanned runs plan for upto bytes written and checks what it
// yields: pieces in file order, within what was written, none empty or
// longer than a chunk (4096), and no more than most.
func checkPlanned(t *testing.T, plan *store.PiecePlan, upto, most int64) {
	t.Helper()
	var end int64
	for k := int64(0); ; k++ {
		off, n, ok := plan.Next(upto)
		if !ok {
			return
		}
		if off < end || n <= 0 || n > 4096 || off+n > upto || k > most {
			t.Fatalf("piece %d [%d,+%d) after %d, with %d bytes written", k, off, n, end, upto)
		}
		end = off + n
	}
}
