package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// MatchModel is the model of the prefix-lookup benchmarks: 16 bytes of
// cache per token, so that 10,000 snapshots take a few hundred MB.
var MatchModel = snapgen.Model{ID: "bench/match", Layers: 1, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}

// FillMatch stores n snapshots for prefix lookups, in 10 namespaces
// directories of the engine's layout: snapshot i holds a system prompt of
// 256 tokens that all share, then 512 tokens of its own (768 in all). It
// returns one prompt per snapshot: its first 700 tokens then 100 others,
// whose best match is that snapshot, 700 tokens.
func FillMatch(t testing.TB, s *store.Store, n int) []store.MatchQuery {
	t.Helper()
	system := snapgen.Tokens(256, 1)
	qs := make([]store.MatchQuery, n)
	// Concurrent puts share their syncs (the journal's group commit).
	const workers = 16
	errs := make(chan error, workers)
	dir := t.TempDir()
	for w := range workers {
		go func() {
			src := filepath.Join(dir, fmt.Sprintf("s%d.mlxkv", w))
			for i := w; i < n; i += workers {
				tokens := snapgen.Extend(system, 512, uint64(1000+i))
				h, tensors := MatchModel.Snapshot(tokens)
				if _, _, err := (&mlx.Writer{}).Write(src, h, tensors); err != nil {
					errs <- err
					return
				}
				p := fmt.Sprintf("%s/ns%d/%08d.mlxkv", h.ConfigFingerprint, i%10, i)
				if _, _, err := s.PutFile(context.Background(), src, p, store.PutOptions{Mode: 0o644}); err != nil {
					errs <- err
					return
				}
				qs[i] = store.MatchQuery{Model: h.ModelID, Fingerprint: h.ConfigFingerprint,
					Tokens: snapgen.Extend(tokens[:700], 100, uint64(i))}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return qs
}
