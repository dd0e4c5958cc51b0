package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// llamaPlan makes a new file's plan as a writer does, retrying as b's
// bytes arrive step by step until the plan is made or refused; nil if it
// still asks for more once all are written (as the commit then hashes
// all). The plan reads b as the file grows: only the bytes written.
func llamaPlan(t *testing.T, s *store.Store, b []byte, step int64) (*store.PiecePlan, error) {
	t.Helper()
	for n := min(step, int64(len(b))); ; n = min(n+step, int64(len(b))) {
		plan, err := s.ContentPieces(bytes.NewReader(b), n)
		if !errors.Is(err, store.ErrMorePieces) {
			return plan, err
		}
		if n == int64(len(b)) {
			return nil, nil
		}
	}
}

// TestLlamaPieces: a llama.cpp state file's rows are hashed as it is
// written, its blocks found header by header and its parent from its head,
// so that its commit hashes only what lies outside them (block headers,
// rows too short to hash early, a second cache): the conversation's files
// commit hashing at most a twentieth of their bytes, each reusing the
// file before it, store as without the writer's sums, and read back
// exactly. A file whose head the writer reads wrongly (2D-position cells)
// commits exactly all the same, hashing what the writer got wrong.
func TestLlamaPieces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  llamastatetest.Spec
		early bool // hashed mostly by the writer
	}{
		{"flash attention", llamastatetest.Spec{Layers: 4, KRow: 1024, FlashAttn: true}, true},
		{"transposed V", llamastatetest.Spec{Layers: 4, KRow: 1024, VEl: 2, VChannels: 512}, true},
		{"session", llamastatetest.Spec{Session: true, Arch: "llama", Layers: 3, KRow: 1024, FlashAttn: true}, true},
		{"SWA", llamastatetest.Spec{Layers: 2, KRow: 1024, FlashAttn: true, Caches: 2}, false},
		{"2D positions", llamastatetest.Spec{Layers: 2, KRow: 1024, FlashAttn: true, Ext: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			early := storetest.New(t, storetest.Options{})
			late := storetest.New(t, storetest.Options{})
			files, _ := llamastatetest.Series(tc.spec)
			for i, b := range files {
				name := fmt.Sprintf("conv-%02d", i)
				plan, err := llamaPlan(t, early, b, 4099)
				if err != nil {
					t.Fatalf("file %d: %v", i, err)
				}
				var pieces []store.Piece
				if plan != nil {
					pieces = piecesOf(t, plan, b, 65_537)
				} else if tc.early {
					t.Fatalf("file %d: no plan", i)
				}
				fi, err := early.CreateAt(1, name, 0o644, store.Owner{})
				if err != nil {
					t.Fatal(err)
				}
				f := changeSpool(t, early, b, nil)
				if _, err := f.WriteAt(b, 0); err != nil {
					t.Fatal(err)
				}
				// Odd files' commits may adopt the spool, or copy their
				// new chunks out of it (gathered: a transposed V's new
				// tails lie between stored bytes).
				_, st, err := early.CommitChanges(ctx, fi.Ino, store.Changes{Size: int64(len(b)), Spool: f, Pieces: pieces}, nil, store.CommitOptions{Adopt: i%2 == 1})
				if err != nil {
					t.Fatal(err)
				}
				want := put(t, late, name, b)
				if st.Kind != "llama" || st.NewBytes != want.NewBytes || st.Chunks != want.Chunks || st.ParentReused != want.ParentReused {
					t.Fatalf("file %d with the writer's sums: %+v; without: %+v", i, st, want)
				}
				if tc.early && (st.HashedBytes*20 > int64(len(b)) || i > 0 && i != 10 && st.ParentReused == 0) {
					t.Fatalf("file %d of %d bytes: hashed %d at commit, reused %d of its parent's", i, len(b), st.HashedBytes, st.ParentReused)
				}
				if got := get(t, early, name); !bytes.Equal(got, b) {
					t.Fatalf("file %d reads back wrong", i)
				}
			}
			if err := early.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzLlamaPieces: whatever the bytes of a llama.cpp state file being
// written, its plan is refused or yields, for any amount written, pieces
// in file order within what was written, none empty or longer than a
// chunk, and no more than one per 256 bytes written and one per block.
func FuzzLlamaPieces(f *testing.F) {
	for _, s := range []llamastatetest.Spec{
		{Layers: 2, KRow: 64, FlashAttn: true},
		{Layers: 2, KRow: 64, VEl: 2, VChannels: 16},
		{Session: true, Arch: "llama", Layers: 1, KRow: 64, VEl: 2, VChannels: 8, Caches: 2},
	} {
		b := llamastatetest.Write(s, make([]uint32, 70))
		f.Add(b, int64(len(b)))
		f.Add(b, int64(len(b)/2))
	}
	s := storetest.New(f, storetest.Options{ChunkSize: 4096})
	f.Fuzz(func(t *testing.T, b []byte, upto int64) {
		upto = max(0, min(upto, int64(len(b))))
		plan, err := s.ContentPieces(bytes.NewReader(b), upto)
		if err != nil || plan.Segments() {
			return
		}
		// A channel run of fewer than 256 bytes is merged with its
		// layer's (minRunBytes); a block of one short row is one of at
		// most 2 × 4096 per stream.
		checkPlanned(t, plan, upto, upto/256+2*4096+4)
	})
}

// TestRefusedLlamaCutByContent: a file the writer planned as a llama.cpp
// state file, whose commit refuses it (3 bytes follow its last block), is
// cut by its content as if the writer had hashed nothing: the writer's row
// pieces are no content cuts (red team, issue 29: such a file was cut into
// its rows, of 256 bytes, and one of 2M rows failed to commit).
func TestRefusedLlamaCutByContent(t *testing.T) {
	early := storetest.New(t, storetest.Options{})
	late := storetest.New(t, storetest.Options{})
	tokens := make([]uint32, 300)
	for i := range tokens {
		tokens[i] = uint32(i*5 + 1)
	}
	b := append(llamastatetest.Write(llamastatetest.Spec{Layers: 4, KRow: 1024, VEl: 2, VChannels: 512}, tokens), 1, 2, 3)
	plan, err := llamaPlan(t, early, b, 4099)
	if err != nil || plan == nil {
		t.Fatalf("no plan while written: %v", err)
	}
	pieces := piecesOf(t, plan, b, 65_537)
	if len(pieces) < 2000 {
		t.Fatalf("the writer hashed %d pieces, want its rows (a run per V channel)", len(pieces))
	}
	fi, err := early.CreateAt(1, "refused", 0o644, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	f := changeSpool(t, early, b, nil)
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	_, st, err := early.CommitChanges(ctx, fi.Ino, store.Changes{Size: int64(len(b)), Spool: f, Pieces: pieces}, nil, store.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := put(t, late, "refused", b)
	if st.Kind != "plain" || st.Chunks != want.Chunks || st.Chunks > len(b)/4096 {
		t.Fatalf("committed with the writer's row sums: %s, %d chunks; without: %s, %d chunks", st.Kind, st.Chunks, want.Kind, want.Chunks)
	}
	if got := get(t, early, "refused"); !bytes.Equal(got, b) {
		t.Fatal("reads back wrong")
	}
}
