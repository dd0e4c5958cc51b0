package pool_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
)

// matchModel is a small model: 16 bytes of cache per token.
var matchModel = snapgen.Model{ID: "test/match", Layers: 1, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}

// publishSnap publishes a snapshot of tokens as path through p, after
// edit changes its header, and returns its bytes.
func publishSnap(t testing.TB, p *pool.Pool, path string, tokens []uint32, edit func(*mlx.Header)) []byte {
	t.Helper()
	h, tensors := matchModel.Snapshot(tokens)
	if edit != nil {
		edit(h)
	}
	src := filepath.Join(t.TempDir(), "s.mlxkv")
	if _, _, err := (&mlx.Writer{}).Write(src, h, tensors); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, path, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	return b
}

func poolQuery(tokens []uint32) store.MatchQuery {
	return store.MatchQuery{Model: matchModel.ID, Fingerprint: matchModel.ID + "-fp", Tokens: tokens}
}

func wantPoolHit(t *testing.T, p *pool.Pool, q store.MatchQuery, path string, tokens int64, trim bool) {
	t.Helper()
	r, err := p.Match(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Hit || r.Path != path || r.Tokens != tokens || r.Trim != trim {
		t.Fatalf("match = %+v, want a hit on %s for %d tokens (trim %v)", r, path, tokens, trim)
	}
}

func wantPoolMiss(t *testing.T, p *pool.Pool, q store.MatchQuery, reason string) {
	t.Helper()
	r, err := p.Match(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if r.Hit || r.Reason != reason {
		t.Fatalf("match = %+v, want a miss: %s", r, reason)
	}
}

// TestMatch: snapshots published through two hosts are found from a
// third by the single-host lookup's rules (store/match_test.go's cases):
// strictly longer wins, one prompt token is left to compute, a tie goes to
// the earliest published, renames and removals are followed, a name not
// ending in .mlxkv is never an answer, a snapshot that must be trimmed
// must be trimmable, each miss reason, and a manifest whose snapshot record
// lies about the tokens is caught by the header read.
func TestMatch(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	b := s.host(t, s.config(t, ""))
	c := s.host(t, s.config(t, t.TempDir())) // looks up
	base := snapgen.Tokens(2000, 1)
	wantPoolMiss(t, c, poolQuery(base[:600]), store.MissNoModel)
	publishSnap(t, a, "fp/base/a.mlxkv", base[:512], nil)
	publishSnap(t, b, "fp/base/b.mlxkv", base[:1100], nil)
	publishSnap(t, a, "fp/base/c.mlxkv", snapgen.Extend(base[:768], 300, 9), nil)
	// b shares 1100 tokens, c 768: b wins, not trimmed.
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:1100], 50, 2)), "fp/base/b.mlxkv", 1100, false)
	// A prompt of exactly b's tokens: one must be left, so 1099, trimmed.
	wantPoolHit(t, c, poolQuery(base[:1100]), "fp/base/b.mlxkv", 1099, true)
	// Diverging at 600: b and c tie; the first published wins.
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:600], 100, 3)), "fp/base/b.mlxkv", 600, true)
	// Renames and removals, through another host.
	if err := a.Rename(ctx, "fp/base/b.mlxkv", "fp/base/b2.mlxkv"); err != nil {
		t.Fatal(err)
	}
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:1100], 50, 2)), "fp/base/b2.mlxkv", 1100, false)
	if err := b.Remove(ctx, "fp/base/b2.mlxkv"); err != nil {
		t.Fatal(err)
	}
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:1100], 50, 2)), "fp/base/c.mlxkv", 768, true)
	// Not a .mlxkv name: never an answer.
	if err := a.Rename(ctx, "fp/base/c.mlxkv", "fp/base/c.mlxkv.tmp"); err != nil {
		t.Fatal(err)
	}
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:1100], 50, 2)), "fp/base/a.mlxkv", 512, false)

	// Trimmable: a wrapped ring seeds only its own length.
	ring := snapgen.Tokens(2000, 5)
	publishSnap(t, b, "fp/base/ring.mlxkv", ring[:1024], func(h *mlx.Header) {
		for i := range h.Caches {
			h.Caches[i].Kind = mlx.KindRotating
			h.Caches[i].MaxSize = h.Caches[i].Offset
			h.Caches[i].Idx = 0
		}
	})
	wantPoolMiss(t, c, poolQuery(snapgen.Extend(ring[:700], 100, 6)), store.MissNotTrimmable)
	wantPoolHit(t, c, poolQuery(snapgen.Extend(ring[:1024], 10, 6)), "fp/base/ring.mlxkv", 1024, false)

	// Misses: namespace, prompt shorter than a group, no common prefix.
	q := poolQuery(base[:600])
	q.NS = "french"
	wantPoolMiss(t, c, q, store.MissNamespace)
	wantPoolMiss(t, c, poolQuery(base[:200]), store.MissPromptShort)
	wantPoolMiss(t, c, poolQuery(snapgen.Tokens(600, 77)), store.MissNoCommonPrefix)

	// A snapshot published as a file that does not parse is no candidate,
	// and the lookup still answers from the others.
	junk := []byte("not a snapshot")
	if err := a.Publish(ctx, "fp/base/junk.mlxkv", bytes.NewReader(junk), int64(len(junk))); err != nil {
		t.Fatal(err)
	}
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:1100], 50, 2)), "fp/base/a.mlxkv", 512, false)

	// A snapshot published under another name and renamed into a .mlxkv
	// name has no record in its manifest: the lookup reads its header.
	late := snapgen.Tokens(900, 42)
	publishSnap(t, b, "fp/base/late.part", late, nil)
	wantPoolMiss(t, c, poolQuery(snapgen.Extend(late, 10, 1)), store.MissNoCommonPrefix)
	if err := b.Rename(ctx, "fp/base/late.part", "fp/base/late.mlxkv"); err != nil {
		t.Fatal(err)
	}
	wantPoolHit(t, c, poolQuery(snapgen.Extend(late, 10, 1)), "fp/base/late.mlxkv", 900, false)

	// The answer reads byte-identical from the host that looked it up.
	// A liar published first claims long's chain keys for other tokens:
	// it would win the tie, but its own header gives it away.
	publishSnap(t, b, "fp/base/liar.mlxkv", snapgen.Tokens(1500, 99), nil)
	want := publishSnap(t, a, "fp/base/long.mlxkv", base[:1500], nil)
	if err := b.ForgeSnap(ctx, "fp/base/liar.mlxkv", "fp/base/long.mlxkv"); err != nil {
		t.Fatal(err)
	}
	wantPoolHit(t, c, poolQuery(snapgen.Extend(base[:1500], 1, 8)), "fp/base/long.mlxkv", 1500, false)
	readBack(t, c, "fp/base/long.mlxkv", want)
}
