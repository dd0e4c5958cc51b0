package gc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// A blocks-layout snapshot: its blocks are not candidates while its
// manifest lists them; the manifest goes first (its cost is its token
// count), and its blocks follow in the next pass, their bytes freed at
// once.
func TestEvictBlocksFollowManifest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(40, 1))
	if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 16384}).Write(filepath.Join(dir, "m.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{BlobGrace: time.Millisecond}})
	blocks, err := os.ReadDir(filepath.Join(dir, "blocks"))
	if err != nil || len(blocks) == 0 {
		t.Fatalf("blocks: %v", err)
	}
	for _, b := range blocks {
		if _, _, err := s.PutFile(ctx, filepath.Join(dir, "blocks", b.Name()), "/ns/blocks/"+b.Name(), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, st, err := s.PutFile(ctx, filepath.Join(dir, "m.mlxkv"), "/ns/m.mlxkv", store.PutOptions{}); err != nil || st.Kind != "mlxkv" {
		t.Fatalf("manifest stored as %+v: %v", st, err)
	}
	time.Sleep(10 * time.Millisecond) // past the blob grace
	cands, _, err := s.Candidates()
	if err != nil {
		t.Fatal(err)
	}
	if len(cands) != 1 || cands[0].Cost != 40 {
		t.Fatalf("candidates %+v: want the manifest alone, cost 40 tokens", cands)
	}
	if _, err := s.SetSettings(map[string]string{"capacity": "1", "retention": "cost-size"}); err != nil {
		t.Fatal(err)
	}
	got, err := gc.Evict(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1+len(blocks) || got[0].Path != "/ns/m.mlxkv" {
		t.Fatalf("evicted %v, want the manifest then %d blocks", evictedPaths(got), len(blocks))
	}
	for _, e := range got[1:] {
		if !strings.HasPrefix(e.Path, "/ns/blocks/") {
			t.Fatalf("evicted %v", evictedPaths(got))
		}
	}
	if n := stored(t, s); n != 0 {
		t.Fatalf("stored %d after evicting everything", n)
	}
}
