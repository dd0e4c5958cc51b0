package store_test

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// matchModel is a small model: 16 bytes of cache per token.
var matchModel = snapgen.Model{ID: "test/match", Layers: 1, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}

// putSnap stores a snapshot of tokens at path (whole layout, or blocks),
// after edit changes its header.
func putSnap(t testing.TB, s *store.Store, path string, tokens []uint32, edit func(*mlx.Header)) {
	t.Helper()
	h, tensors := matchModel.Snapshot(tokens)
	if edit != nil {
		edit(h)
	}
	src := filepath.Join(t.TempDir(), "s.mlxkv")
	if _, _, err := (&mlx.Writer{}).Write(src, h, tensors); err != nil {
		t.Fatal(err)
	}
	_, st, err := s.PutFile(ctx, src, path, store.PutOptions{Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != "mlxkv" {
		t.Fatalf("%s stored as %s: %s", path, st.Kind, st.Note)
	}
}

func query(tokens []uint32) store.MatchQuery {
	return store.MatchQuery{Model: matchModel.ID, Fingerprint: matchModel.ID + "-fp", Tokens: tokens}
}

func wantHit(t *testing.T, s *store.Store, q store.MatchQuery, c *store.Cred, path string, tokens int64, trim bool) {
	t.Helper()
	r, err := s.Match(q, c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Hit || r.Path != path || r.Tokens != tokens || r.Trim != trim {
		t.Fatalf("match = %+v, want a hit on %s for %d tokens (trim %v)", r, path, tokens, trim)
	}
}

func wantMiss(t *testing.T, s *store.Store, q store.MatchQuery, c *store.Cred, reason string) {
	t.Helper()
	r, err := s.Match(q, c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Hit || r.Reason != reason {
		t.Fatalf("match = %+v, want a miss: %s", r, reason)
	}
}

// TestMatchHits: strictly longer wins, one prompt token is left to
// compute (a snapshot as long as the prompt is used trimmed by one), a
// partial last group counts, and both layouts are found.
func TestMatchHits(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	base := snapgen.Tokens(2000, 1)
	putSnap(t, s, "fp/base/a.mlxkv", base[:512], nil)
	putSnap(t, s, "fp/base/b.mlxkv", base[:1100], nil)
	putSnap(t, s, "fp/base/c.mlxkv", snapgen.Extend(base[:768], 300, 9), nil)
	// b shares 1100 tokens, c 768: b wins, not trimmed.
	wantHit(t, s, query(snapgen.Extend(base[:1100], 50, 2)), nil, "fp/base/b.mlxkv", 1100, false)
	// A prompt of exactly b's tokens: one must be left, so 1099, trimmed.
	wantHit(t, s, query(base[:1100]), nil, "fp/base/b.mlxkv", 1099, true)
	// A prompt diverging at 600: b and c tie at 600; the first committed wins.
	wantHit(t, s, query(snapgen.Extend(base[:600], 100, 3)), nil, "fp/base/b.mlxkv", 600, true)
	// The index follows renames, and removal.
	if err := s.Rename("fp/base/b.mlxkv", "fp/base/b2.mlxkv"); err != nil {
		t.Fatal(err)
	}
	wantHit(t, s, query(snapgen.Extend(base[:1100], 50, 2)), nil, "fp/base/b2.mlxkv", 1100, false)
	if err := s.Remove("fp/base/b2.mlxkv"); err != nil {
		t.Fatal(err)
	}
	wantHit(t, s, query(snapgen.Extend(base[:1100], 50, 2)), nil, "fp/base/c.mlxkv", 768, true)
	// A file being written (.mlxkv.tmp) is not offered.
	if err := s.Rename("fp/base/c.mlxkv", "fp/base/c.mlxkv.tmp"); err != nil {
		t.Fatal(err)
	}
	wantHit(t, s, query(snapgen.Extend(base[:1100], 50, 2)), nil, "fp/base/a.mlxkv", 512, false)
	// Blocks layout.
	h, tensors := matchModel.Snapshot(base[:1300])
	src := filepath.Join(t.TempDir(), "d.mlxkv")
	if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 4096}).Write(src, h, tensors); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutFile(ctx, src, "fp/base/d.mlxkv", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wantHit(t, s, query(snapgen.Extend(base[:1300], 5, 4)), nil, "fp/base/d.mlxkv", 1300, false)
	st := s.MatchStats()
	if st.Hits != 7 {
		t.Errorf("hits counted %d, want 7", st.Hits)
	}
}

// TestMatchTrimmable: a longer snapshot seeds a shorter prompt only if it
// is trimmable (a wrapped rotating ring is not); the shorter trimmable one
// is used instead, and without it the miss says why.
func TestMatchTrimmable(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	base := snapgen.Tokens(2000, 5)
	wrapped := func(h *mlx.Header) {
		for i := range h.Caches {
			h.Caches[i].Kind = mlx.KindRotating
			h.Caches[i].MaxSize = h.Caches[i].Offset // offset ≥ maxSize: wrapped
			h.Caches[i].Idx = 0
		}
	}
	putSnap(t, s, "fp/base/ring.mlxkv", base[:1024], wrapped)
	prompt := snapgen.Extend(base[:700], 100, 6)
	wantMiss(t, s, query(prompt), nil, store.MissNotTrimmable)
	// At full length it needs no trim: a hit.
	wantHit(t, s, query(snapgen.Extend(base[:1024], 10, 6)), nil, "fp/base/ring.mlxkv", 1024, false)
	putSnap(t, s, "fp/base/short.mlxkv", base[:512], nil)
	wantHit(t, s, query(prompt), nil, "fp/base/short.mlxkv", 512, false)
}

// TestMatchMisses: each miss reason, from a case built for it.
func TestMatchMisses(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	base := snapgen.Tokens(2000, 7)
	wantMiss(t, s, query(base[:600]), nil, store.MissNoModel)
	putSnap(t, s, "fp/ns/a.mlxkv", base[:1024], func(h *mlx.Header) {
		h.NS = "french"
		for i := range h.Caches {
			m := int64(1000)
			h.Caches[i].MinimumReusableOffset = &m
		}
	})
	wantMiss(t, s, query(base[:600]), nil, store.MissNamespace)
	q := query(snapgen.Extend(base[:800], 10, 8))
	q.NS = "french"
	wantMiss(t, s, q, nil, store.MissMinimum) // 800 < minimumReusableOffset 1000
	q.Tokens = base[:200]
	wantMiss(t, s, q, nil, store.MissPromptShort)
	q.Tokens = snapgen.Tokens(600, 99)
	wantMiss(t, s, q, nil, store.MissNoCommonPrefix)
	q.Tokens = snapgen.Extend(base[:1024], 1, 8)
	wantHit(t, s, q, nil, "fp/ns/a.mlxkv", 1024, false)
	q.Fingerprint = "other"
	wantMiss(t, s, q, nil, store.MissNoModel)
	st := s.MatchStats()
	for _, r := range []string{store.MissNoModel, store.MissNamespace, store.MissMinimum, store.MissPromptShort, store.MissNoCommonPrefix} {
		if st.Misses[r] == 0 {
			t.Errorf("miss %s not counted: %+v", r, st)
		}
	}
	stats, err := s.Stats()
	if err != nil || stats.Match.Misses[store.MissNoModel] != 2 || stats.Match.Hits != 1 {
		t.Errorf("Stats().Match = %+v, %v", stats.Match, err)
	}
}

// TestMatchPermission: a caller learns only of snapshots it may read: one
// in a directory it may not search, or a file it may not read, is not
// there for it, down to the miss reason.
func TestMatchPermission(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	base := snapgen.Tokens(2000, 11)
	if err := s.Mkdir("private", 0o700, false); err != nil {
		t.Fatal(err)
	}
	putSnap(t, s, "private/base/a.mlxkv", base[:1024], nil)
	user := &store.Cred{UID: 1000, GID: 1000}
	q := query(snapgen.Extend(base[:1024], 10, 1))
	wantHit(t, s, q, nil, "private/base/a.mlxkv", 1024, false)
	wantHit(t, s, q, &store.Cred{UID: 0}, "private/base/a.mlxkv", 1024, false)
	wantMiss(t, s, q, user, store.MissNoModel)
	putSnap(t, s, "pub/base/b.mlxkv", base[:512], nil)
	wantHit(t, s, q, user, "pub/base/b.mlxkv", 512, false)
	keys := mlx.ChainKeys(q.Model, q.Fingerprint, q.NS, q.Tokens)
	if _, err := s.MatchKey(keys[4], user); err == nil {
		t.Error("MatchKey revealed a snapshot the caller may not read")
	}
	if r, err := s.MatchKey(keys[4], nil); err != nil || r.Path != "private/base/a.mlxkv" || r.Tokens != 1024 {
		t.Errorf("MatchKey(h4) = %+v, %v", r, err)
	}
	if r, err := s.MatchKey(keys[2], user); err != nil || r.Path != "pub/base/b.mlxkv" || r.Tokens != 512 {
		t.Errorf("MatchKey(h2) as a user = %+v, %v", r, err)
	}
}

// TestMatchCandidates: a prefix key's candidates are every snapshot
// indexed under it that the caller may read, usable or not, earliest
// committed first; model keys and h0 have none; MatchCandidateAt answers
// only for a candidate of that key, and SnapshotPath only for what the
// caller may read.
func TestMatchCandidates(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	base := snapgen.Tokens(2000, 13)
	if err := s.Mkdir("private", 0o700, false); err != nil {
		t.Fatal(err)
	}
	putSnap(t, s, "pub/base/a.mlxkv", snapgen.Extend(base[:600], 100, 1), nil)
	putSnap(t, s, "private/base/b.mlxkv", base[:900], nil)
	putSnap(t, s, "pub/base/c.mlxkv", base[:1024], func(h *mlx.Header) {
		off := int64(1000)
		for i := range h.Caches {
			h.Caches[i].MinimumReusableOffset = &off
		}
	})
	putSnap(t, s, "pub/base/other.mlxkv", snapgen.Tokens(700, 99), nil)
	user := &store.Cred{UID: 1000, GID: 1000}
	keys := mlx.ChainKeys(matchModel.ID, matchModel.ID+"-fp", "", base)
	paths := func(c *store.Cred, k mlx.ChainKey) []string {
		t.Helper()
		cs, err := s.MatchCandidates(k, c)
		if err != nil {
			t.Fatalf("MatchCandidates: %v", err)
		}
		var out []string
		for i, cd := range cs {
			if i > 0 && cs[i-1].Ino >= cd.Ino {
				t.Errorf("candidates out of commit order: %+v", cs)
			}
			out = append(out, cd.Path)
		}
		return out
	}
	if got := fmt.Sprint(paths(nil, keys[2])); got != "[pub/base/a.mlxkv private/base/b.mlxkv pub/base/c.mlxkv]" {
		t.Errorf("candidates of h2 = %s", got)
	}
	if got := fmt.Sprint(paths(user, keys[2])); got != "[pub/base/a.mlxkv pub/base/c.mlxkv]" {
		t.Errorf("candidates of h2 as a user = %s", got)
	}
	// c is not usable at h3 (768 < 1000) but is a candidate there.
	if got := fmt.Sprint(paths(user, keys[3])); got != "[pub/base/c.mlxkv]" {
		t.Errorf("candidates of h3 as a user = %s", got)
	}
	if _, err := s.MatchKey(keys[3], user); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("MatchKey(h3) as a user: %v, want not found", err)
	}
	for _, k := range []mlx.ChainKey{mlx.ModelKey(matchModel.ID, matchModel.ID+"-fp"), keys[0], keys[5]} {
		if _, err := s.MatchCandidates(k, nil); !errors.Is(err, iofs.ErrNotExist) {
			t.Errorf("MatchCandidates(%x): %v, want not found", k[:4], err)
		}
	}
	cs, _ := s.MatchCandidates(keys[2], nil)
	b := cs[1]
	if _, err := s.MatchCandidateAt(keys[2], b.Ino, user); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("MatchCandidateAt(b) as a user: %v", err)
	}
	if p, err := s.MatchCandidateAt(keys[2], b.Ino, nil); err != nil || p != b.Path {
		t.Errorf("MatchCandidateAt(b) = %q, %v", p, err)
	}
	if _, err := s.MatchCandidateAt(keys[4], cs[0].Ino, nil); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("MatchCandidateAt(a) under h4, which a does not have: %v", err)
	}
	if _, err := s.SnapshotPath(b.Ino, user); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("SnapshotPath(b) as a user: %v", err)
	}
	if err := s.Remove("pub/base/c.mlxkv"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MatchCandidates(keys[3], user); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("MatchCandidates(h3) after c's removal: %v", err)
	}
}
