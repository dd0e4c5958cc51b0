package manifest

import (
	"slices"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
)

// TestDamagedExtents: a damaged run survives encoding as damaged (not as
// plain zeros, which read back as written), is merged only with adjacent
// damaged runs, counts in Size and lists no chunk.
func TestDamagedExtents(t *testing.T) {
	id := blockstore.Sum([]byte("x"))
	m := Manifest{
		{ID: id, Len: 10},
		{Zero: true, Len: 5},
		{Zero: true, Damaged: true, Len: 7},
		{Zero: true, Damaged: true, Len: 3},
		{Zero: true, Len: 2},
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Manifest
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	want := Manifest{
		{ID: id, Len: 10},
		{Zero: true, Len: 5},
		{Zero: true, Damaged: true, Len: 10},
		{Zero: true, Len: 2},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	if got.Size() != 27 || len(got.Chunks()) != 1 {
		t.Errorf("size %d, chunks %v", got.Size(), got.Chunks())
	}
	if m.ID() == (Manifest{{ID: id, Len: 10}, {Zero: true, Len: 17}}).ID() {
		t.Error("a damaged run has the ID of plain zeros")
	}
}
