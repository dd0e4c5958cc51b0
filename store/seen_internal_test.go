package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
)

const seenFixtures = "../mlx/testdata/mlxbun/blocks/fixture-fingerprint/base"

// seenSnapshot reads the fixture manifest of T tokens (300 or 400: a
// conversation and its next turn, sharing 64 of their blocks).
func seenSnapshot(t *testing.T, T string) (string, []string) {
	t.Helper()
	path := filepath.Join(seenFixtures, "00000000-0000-4000-8000-000000000"+T+".mlxkv")
	snap, err := mlx.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []string
	for _, sl := range snap.Header.Slots() {
		for _, b := range sl.Blocks {
			hashes = append(hashes, b.Hash)
		}
	}
	return path, hashes
}

// engineWrite writes a snapshot as the engine does (FORMAT.md §4.3): each
// block that does not exist, then, once commit is called, the manifest.
// Every block found existing is reported to the store as seen, as the
// file system does for a lookup. It returns the blocks it found.
func engineWrite(t *testing.T, s *Store, ns, T string) (reused []string, commit func()) {
	t.Helper()
	manifestPath, hashes := seenSnapshot(t, T)
	for _, h := range hashes {
		if fi, err := s.Stat(ns + "/blocks/" + h); err == nil {
			if fi.Blob != "" && fi.Blob != h {
				t.Fatalf("block %s is blob %s", h, fi.Blob)
			}
			s.SawBlob(h, time.Second)
			reused = append(reused, h)
			continue
		}
		if _, _, err := s.PutFile(context.Background(), filepath.Join(seenFixtures, "blocks", h), ns+"/blocks/"+h, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return reused, func() {
		t.Helper()
		if _, _, err := s.PutFile(context.Background(), manifestPath, ns+"/"+T+".mlxkv", PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// restorable checks that every block the manifest of T tokens lists reads
// back with its hash, as the engine's restore opens them.
func restorable(t *testing.T, s *Store, ns, T string) {
	t.Helper()
	_, hashes := seenSnapshot(t, T)
	blocks, err := s.Stat(ns + "/blocks")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hashes {
		fi, err := s.Lookup(blocks.Ino, h)
		if err != nil {
			fi, err = s.AdoptBlob(blocks.Ino, h, nil)
		}
		if err != nil {
			t.Fatalf("restore %s/%s.mlxkv: block %s: %v", ns, T, h, err)
		}
		f, err := s.OpenIno(fi.Ino)
		if err != nil {
			t.Fatalf("restore: open block %s: %v", h, err)
		}
		sum := sha256.New()
		_, err = io.Copy(sum, io.NewSectionReader(f, 0, f.Size()))
		f.Close()
		if err != nil || hex.EncodeToString(sum.Sum(nil)) != h {
			t.Fatalf("restore: block %s reads back wrong (%v)", h, err)
		}
	}
}

// ageAll moves every inode's times back by d and forgets that the store
// was just opened: a store mounted long ago, whose blocks are past their
// grace period.
func ageAll(t *testing.T, s *Store, d time.Duration) {
	t.Helper()
	err := s.db.Update(func(tx *manifest.Tx) error {
		var all []*manifest.Inode
		if err := tx.ForEachInode(func(n *manifest.Inode) error {
			c := *n
			all = append(all, &c)
			return nil
		}); err != nil {
			return err
		}
		for _, n := range all {
			n.Ctime -= int64(d)
			n.Mtime -= int64(d)
			if err := tx.PutInode(n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.seen.mu.Lock()
	s.seen.floor = 0
	s.seen.mu.Unlock()
}

func openSeenStore(t *testing.T) *Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 16384); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{}) // the default grace period
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// evictAll evicts every candidate, as a pass at a capacity of one byte
// would, and returns how many files went.
func evictAll(t *testing.T, s *Store) int {
	t.Helper()
	cands, _, err := s.Candidates()
	if err != nil {
		t.Fatal(err)
	}
	var victims []Victim
	for _, c := range cands {
		victims = append(victims, Victim{Candidate: c, Reason: "test"})
	}
	done, err := s.EvictVictims(victims, RetentionLRU)
	if err != nil {
		t.Fatal(err)
	}
	return len(done)
}

// TestSeenBlockSurvivesEviction: turn 1 of a conversation was dropped long
// ago; turn 2 finds 64 of its blocks existing and skips them; eviction at
// capacity runs before turn 2's manifest commits. The 64 blocks seen stay,
// the 32 others go, and the snapshot is restorable.
func TestSeenBlockSurvivesEviction(t *testing.T) {
	s := openSeenStore(t)
	_, commit1 := engineWrite(t, s, "ns", "300")
	commit1()
	ageAll(t, s, time.Hour)
	if err := s.Remove("ns/300.mlxkv"); err != nil {
		t.Fatal(err)
	}
	// Chosen before turn 2's check: all 96 blocks of turn 1.
	early, _, err := s.Candidates()
	if err != nil {
		t.Fatal(err)
	}
	if len(early) != 96 {
		t.Fatalf("%d candidates, want turn 1's 96 blocks", len(early))
	}
	reused, commit2 := engineWrite(t, s, "ns", "400")
	if len(reused) != 64 {
		t.Fatalf("turn 2 found %d blocks existing, want 64", len(reused))
	}
	// A victim chosen before the sighting is checked again at removal.
	var stale []Victim
	for _, c := range early {
		stale = append(stale, Victim{Candidate: c, Reason: "chosen before the check"})
	}
	done, err := s.EvictVictims(stale, RetentionLRU)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 32 {
		t.Fatalf("evicted %d of the victims chosen before the check, want the 32 it did not see", len(done))
	}
	if n := evictAll(t, s); n != 0 {
		t.Fatalf("a pass after the check evicted %d files, want 0", n)
	}
	for _, h := range reused {
		if _, err := s.Stat("ns/blocks/" + h); err != nil {
			t.Fatalf("block %s that turn 2 saw exist was removed: %v", h, err)
		}
	}
	commit2()
	restorable(t, s, "ns", "400")
}

// TestSeenBlockSurvivesRelease: turn 1's manifest is still there when turn
// 2 checks its blocks, and goes (the engine supersedes it) before turn 2's
// manifest commits, with eviction in between.
func TestSeenBlockSurvivesRelease(t *testing.T) {
	s := openSeenStore(t)
	_, commit1 := engineWrite(t, s, "ns", "300")
	commit1()
	ageAll(t, s, time.Hour)
	reused, commit2 := engineWrite(t, s, "ns", "400")
	if len(reused) != 64 {
		t.Fatalf("turn 2 found %d blocks existing, want 64", len(reused))
	}
	if err := s.Remove("ns/300.mlxkv"); err != nil {
		t.Fatal(err)
	}
	if n := evictAll(t, s); n != 32 {
		t.Fatalf("evicted %d files, want the 32 blocks turn 2 did not see", n)
	}
	commit2()
	restorable(t, s, "ns", "400")
	if n := evictAll(t, s); n != 1 {
		t.Fatalf("evicted %d files after the commit, want the manifest alone", n)
	}
}

// TestSeenBlockOutlivesItsGrace: a block whose names a collect removed is
// kept for the grace period after its last sighting, not only after the
// removal of its name; then it goes.
func TestSeenBlockOutlivesItsGrace(t *testing.T) {
	s := openSeenStore(t)
	_, commit1 := engineWrite(t, s, "ns", "300")
	commit1()
	ageAll(t, s, time.Hour)
	if err := s.Remove("ns/300.mlxkv"); err != nil {
		t.Fatal(err)
	}
	_, hashes := seenSnapshot(t, "300")
	// The collect removes every name at t0, which starts their grace;
	// one block was seen after that (at t0+30s, as if by a lookup then).
	t0 := time.Now()
	for _, h := range hashes {
		if err := s.Remove("ns/blocks/" + h); err != nil {
			t.Fatal(err)
		}
	}
	s.SawBlob(hashes[0], 0)
	s.seen.mu.Lock()
	var key [32]byte
	hex.Decode(key[:], []byte(hashes[0]))
	s.seen.until[key] = t0.Add(30*time.Second + DefaultBlobGrace).UnixNano()
	s.seen.mu.Unlock()
	n, err := s.ExpireBlobs(t0.Add(DefaultBlobGrace + 10*time.Second))
	if err != nil || n != len(hashes)-1 {
		t.Fatalf("expired %d blobs (%v), want all %d but the one seen", n, err, len(hashes)-1)
	}
	blocks, _ := s.Stat("ns/blocks")
	if _, err := s.AdoptBlob(blocks.Ino, hashes[0], nil); err != nil {
		t.Fatalf("the block seen is gone within its grace: %v", err)
	}
	if err := s.Remove("ns/blocks/" + hashes[0]); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ExpireBlobs(t0.Add(DefaultBlobGrace + time.Minute)); err != nil || n != 1 {
		t.Fatalf("after its grace: expired %d (%v), want 1", n, err)
	}
}
