package gc_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// The candidate table's order (store.ChooseFromTable, gc.PlanBounded) is
// the walk's (store.Candidates, gc.Plan) for both policies, through the
// changes an engine snapshot makes: its blocks are no candidates while its
// manifest lists them, and become candidates (with the blob record's
// reference counted as theirs) once the manifest is removed, a change
// the table learns from the blob records, not from the blocks' inodes.
func TestTableOrderMatchesWalk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(40, 1))
	if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 16384}).Write(filepath.Join(dir, "m.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{BlobGrace: time.Millisecond}})
	for i := range 6 {
		data := randBytes(4096*(1+i%3), uint64(i))
		if _, _, err := s.Put(ctx, bytes.NewReader(data), int64(len(data)), fmt.Sprintf("/plain/f%d", i), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LiveBytes(); err != nil { // build the table before the snapshot
		t.Fatal(err)
	}
	blocks, err := os.ReadDir(filepath.Join(dir, "blocks"))
	if err != nil || len(blocks) == 0 {
		t.Fatalf("blocks: %v", err)
	}
	for _, b := range blocks {
		if _, _, err := s.PutFile(ctx, filepath.Join(dir, "blocks", b.Name()), "/ns/blocks/"+b.Name(), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.PutFile(ctx, filepath.Join(dir, "m.mlxkv"), "/ns/m.mlxkv", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // past the blob grace
	compare := func(stage string, wantCands int) {
		t.Helper()
		for _, policy := range []string{gc.LRU, gc.CostSize} {
			cands, stored, err := s.Candidates()
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := gc.Plan(policy, cands, 1<<40, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []gc.Victim
			var tableStored int64
			err = s.ChooseFromTable(func(c store.TableChoice) error {
				tableStored = c.Stored
				var err error
				got, _, err = gc.PlanBounded(policy, c.Cands, 1<<40, 0, c.Exact)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != wantCands || !reflect.DeepEqual(got, want) || tableStored != stored {
				t.Fatalf("%s, %s: table's order %+v (stored %d), walk's %+v (stored %d), want %d candidates", stage, policy, got, tableStored, want, stored, wantCands)
			}
		}
	}
	compare("manifest listing its blocks", 6+1)
	if err := s.Remove("/ns/m.mlxkv"); err != nil {
		t.Fatal(err)
	}
	compare("manifest removed", 6+len(blocks))
	if err := s.KeepPath("/plain/f1", true); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("/plain/f2", "/plain/f3"); err != nil {
		t.Fatal(err)
	}
	compare("a file pinned, one renamed over another", 4+len(blocks))
}
