package store_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestSnapshotSlotCap: a snapshot of more tensors than the cap is stored
// as a plain file (the whole view of one of 100,000 empty tensors, within
// the other caps, once cost minutes of CPU per stat), with the cap named.
func TestSnapshotSlotCap(t *testing.T) {
	dir := t.TempDir()
	m := snapgen.Model{ID: "test/slots", Layers: 3, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}
	h, tensors := m.Snapshot(snapgen.Tokens(8, 1))
	if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 64}).Write(filepath.Join(dir, "m.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cap  int
		kind string
	}{{0, "mlxkv"}, {6, "mlxkv"}, {5, "plain"}} {
		s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{MaxSnapshotSlots: c.cap}})
		_, st, err := s.PutFile(ctx, filepath.Join(dir, "m.mlxkv"), "ns/m.mlxkv", store.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind != c.kind {
			t.Errorf("cap %d: stored as %q (%s), want %q", c.cap, st.Kind, st.Note, c.kind)
		}
		if c.kind == "plain" && !strings.Contains(st.Note, "6 tensors, over the cap of 5") {
			t.Errorf("note %q does not name the cap", st.Note)
		}
	}
}
