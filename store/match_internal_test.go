package store

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
)

// TestMatchIndexBuiltAtOpen: a store whose index has no prefix keys (made
// before them) gets them when it is opened, from the snapshots' headers.
func TestMatchIndexBuiltAtOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, DefaultChunkSize); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := snapgen.Model{ID: "test/open", Layers: 1, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}
	tokens := snapgen.Tokens(600, 3)
	src := filepath.Join(t.TempDir(), "a.mlxkv")
	if err := m.WriteFile(src, tokens); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutFile(context.Background(), src, "fp/base/a.mlxkv", PutOptions{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	q := MatchQuery{Model: m.ID, Fingerprint: m.ID + "-fp", Tokens: snapgen.Extend(tokens, 5, 4)}
	if r, err := s.Match(q, nil); err != nil || !r.Hit {
		t.Fatalf("before: %+v, %v", r, err)
	}
	if err := s.db.Update(func(tx *manifest.Tx) error { return tx.ResetPrefixIndex() }); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Match(q, nil); err != nil || r.Hit || r.Reason != MissNoModel {
		t.Fatalf("index reset: %+v, %v", r, err)
	}
	s.Close()
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Match(q, nil); err != nil || !r.Hit || r.Path != "fp/base/a.mlxkv" || r.Tokens != 600 {
		t.Fatalf("reopened: %+v, %v", r, err)
	}
}
