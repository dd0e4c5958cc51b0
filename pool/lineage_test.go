package pool_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestPrefixSeriesAcrossHosts: a prefix-growth series of 8 snapshots
// published alternately through two hosts stores no more than 1.05× what
// a local store of the same chunk size stores for the same series (issue
// 30: cut every chunk size from offset 0, the pool shared nothing), for
// the engine's whole layout and for llama.cpp state files with a
// transposed V; every file reads back exact through both hosts and a
// third with a cold cache. A file whose manifest claims another's
// lineage (a host that lies) costs the next publish its parent, never a
// wrong byte.
func TestPrefixSeriesAcrossHosts(t *testing.T) {
	model := snapgen.Model{ID: "test/pool-series", Layers: 4, KVHeads: 2, HeadDim: 64, DType: snapgen.Tiny.DType}
	tokens := snapgen.Tokens(8000, 30)
	var mlxkv [][]byte
	for k := 1; k <= 8; k++ {
		mlxkv = append(mlxkv, snapshotFile(t, model, tokens[:1000*k]))
	}
	llama, _ := llamastatetest.Series(llamastatetest.Spec{Layers: 4, KRow: 256, VEl: 2, VChannels: 128})
	for _, tc := range []struct {
		name, ext string
		files     [][]byte
	}{
		{"mlxkv", ".mlxkv", mlxkv},
		{"llama transposed V", ".bin", llama[:8]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServices(t)
			a := s.host(t, s.config(t, t.TempDir()))
			b := s.host(t, s.config(t, t.TempDir()))
			local := storetest.New(t, storetest.Options{ChunkSize: 64 << 10})
			var logical int64
			for k, f := range tc.files {
				path := fmt.Sprintf("series/%d%s", k, tc.ext)
				host := a
				if k%2 == 1 {
					host = b
				}
				if err := host.Publish(ctx, path, bytes.NewReader(f), int64(len(f))); err != nil {
					t.Fatal(err)
				}
				if _, _, err := local.Put(ctx, bytes.NewReader(f), int64(len(f)), path, store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				logical += int64(len(f))
			}
			stored, _ := packBytes(t, s)
			st, err := local.Stats()
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(stored) / float64(st.StoredBytes)
			t.Logf("%s: %d bytes logical; pool %d, local store %d: %.3f×", tc.name, logical, stored, st.StoredBytes, ratio)
			if ratio > 1.05 {
				t.Fatalf("the pool stored %.3f× the local store's bytes, want ≤ 1.05×", ratio)
			}
			c := s.host(t, s.config(t, t.TempDir()))
			for k, f := range tc.files {
				path := fmt.Sprintf("series/%d%s", k, tc.ext)
				for _, h := range []*pool.Pool{a, b, c} {
					checkFile(t, h, path, f, uint64(k))
				}
			}

			// A liar: random bytes whose manifest claims the series' last
			// lineage, under a name that wins a tie.
			liar := randBytes(len(tc.files[7]), 40)
			if err := a.Publish(ctx, "series/0-liar"+tc.ext, bytes.NewReader(liar), int64(len(liar))); err != nil {
				t.Fatal(err)
			}
			if err := a.ForgeLineage(ctx, "series/0-liar"+tc.ext, fmt.Sprintf("series/7%s", tc.ext)); err != nil {
				t.Fatal(err)
			}
			next := tc.files[7]
			if tc.name == "mlxkv" {
				next = snapshotFile(t, model, append(tokens[:8000:8000], snapgen.Tokens(500, 41)...))
			}
			for _, h := range []*pool.Pool{a, b} {
				if err := h.Publish(ctx, "series/next"+tc.ext, bytes.NewReader(next), int64(len(next))); err != nil {
					t.Fatal(err)
				}
				checkFile(t, c, "series/next"+tc.ext, next, 8)
				checkFile(t, h, "series/0-liar"+tc.ext, liar, 9)
			}
		})
	}
}

// snapshotFile is a whole-layout snapshot of tokens, of model m.
func snapshotFile(t *testing.T, m snapgen.Model, tokens []uint32) []byte {
	t.Helper()
	b, err := m.Bytes(tokens)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadsVersion1: a file published by a kvfs that wrote version 1
// manifests (every chunk the chunk size but the last) reads back exact
// through a host that writes version 2, at unaligned offsets, and its
// chunks serve later publishes.
func TestReadsVersion1(t *testing.T) {
	s := startServices(t)
	fixed := s.config(t, t.TempDir())
	fixed.FixedChunks = true
	a := s.host(t, fixed)
	data := randBytes(1_000_003, 50)
	if err := a.Publish(ctx, "old.bin", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := a.RewriteAsVersion1(ctx, "old.bin"); err != nil {
		t.Fatal(err)
	}
	before, _ := packBytes(t, s)
	fixed.CacheDir = t.TempDir()
	b := s.host(t, fixed)
	checkFile(t, b, "old.bin", data, 50)
	if err := b.Publish(ctx, "again.bin", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if after, _ := packBytes(t, s); after != before {
		t.Fatalf("publishing a version 1 file's bytes again stored %d bytes more", after-before)
	}
	checkFile(t, a, "again.bin", data, 51)
}

// TestLongLineageStaysPublishable: a llama.cpp conversation with a
// transposed V gains a chunk per channel per save when each save is cut
// at its parent's chunks; once a file would need more chunks than a
// manifest may hold, it is cut without a parent instead, so the
// conversation goes on publishing (red team: turn 17 of an 8B-shaped
// conversation failed for good), every file reads back exact, and the
// next saves reuse the fresh cut's chunks.
func TestLongLineageStaysPublishable(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, t.TempDir()))
	a.SetMaxChunks(1500)
	files, _ := llamastatetest.Series(llamastatetest.Spec{Layers: 4, KRow: 256, VEl: 2, VChannels: 128})
	fell := false
	prev := 0
	for k, f := range files[:10] {
		path := fmt.Sprintf("conv/%d.bin", k)
		if err := a.Publish(ctx, path, bytes.NewReader(f), int64(len(f))); err != nil {
			t.Fatalf("turn %d: %v", k, err)
		}
		n, err := a.ManifestChunks(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if n > 1500 {
			t.Fatalf("turn %d: %d chunks, over the bound", k, n)
		}
		if n < prev {
			fell = true // cut afresh
		}
		prev = n
		checkFile(t, a, path, f, uint64(k))
	}
	if !fell {
		t.Fatal("no file was cut afresh: the bound was never reached")
	}
	b := s.host(t, s.config(t, t.TempDir()))
	for k, f := range files[:10] {
		checkFile(t, b, fmt.Sprintf("conv/%d.bin", k), f, uint64(k)+20)
	}
}

// TestTinyChunksReadInFewGETs: a llama.cpp conversation with a
// transposed V, each save cut at its parent's chunks, holds chunks of a
// few dozen bytes, each row's from the pack of the save that added it: a
// cold read on another host fetches them a pack's stretch at a time, not
// one GET each (red team: 98,371 GETs for 13 MB), and reads back exact.
func TestTinyChunksReadInFewGETs(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, t.TempDir()))
	spec := llamastatetest.Spec{Layers: 4, KRow: 256, VEl: 2, VChannels: 512}
	var tokens []uint32
	var f []byte
	for turn := 1; turn <= 8; turn++ {
		for range 24 {
			tokens = append(tokens, uint32(len(tokens)*7919%32000))
		}
		f = llamastatetest.Write(spec, tokens)
		if err := a.Publish(ctx, fmt.Sprintf("conv/%d.bin", turn), bytes.NewReader(f), int64(len(f))); err != nil {
			t.Fatal(err)
		}
	}
	chunks, err := a.ManifestChunks(ctx, "conv/8.bin")
	if err != nil {
		t.Fatal(err)
	}
	b := s.host(t, s.config(t, t.TempDir()))
	reads := b.CountReads()
	readBack(t, b, "conv/8.bin", f)
	t.Logf("a cold read of %d bytes in %d chunks: %d GETs", len(f), chunks, reads.Load())
	if n := reads.Load(); n*20 > int64(chunks) {
		t.Fatalf("a cold read of %d chunks made %d GETs", chunks, n)
	}
	checkFile(t, b, "conv/8.bin", f, 3)
}

// TestRenameMovesConcurrentChmod: a chmod (SetOwner) racing a rename of
// the same name is never lost: the new name ends with the owner of the
// last chmod that succeeded on the old one (the rename's transaction
// fails if the owner changed since it read it, and is made again).
func TestRenameMovesConcurrentChmod(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	for round := range 20 {
		from, to := fmt.Sprintf("r%d/a", round), fmt.Sprintf("r%d/b", round)
		if _, err := a.PublishOwned(ctx, from, bytes.NewReader([]byte("x")), 1, &pool.Owner{Uid: 1, Gid: 1, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		last := uint32(0o644)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for m := uint32(0o600); m < 0o700; m++ {
				if err := a.SetOwner(ctx, from, pool.Owner{Uid: 1, Gid: 1, Mode: m}); err != nil {
					return // renamed away
				}
				last = m
				time.Sleep(time.Millisecond)
			}
		}()
		if err := a.Rename(ctx, from, to); err != nil {
			t.Fatal(err)
		}
		<-done
		_, _, o, err := a.ResolveOwned(ctx, to)
		if err != nil || o == nil || o.Mode != last {
			t.Fatalf("round %d: %s's owner %+v, %v; the last chmod of %s set %o", round, to, o, err, from, last)
		}
	}
}
