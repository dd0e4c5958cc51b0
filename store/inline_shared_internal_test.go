package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// chunkLocs returns where the chunks of path lie.
func chunkLocs(t *testing.T, s *Store, path string) []blockstore.Loc {
	t.Helper()
	ino := mustLookup(t, s, path)
	var locs []blockstore.Loc
	if err := s.db.View(func(tx *manifest.Tx) error {
		m, err := tx.Manifest(ino)
		if err != nil {
			return err
		}
		for _, id := range m.Chunks() {
			c, err := tx.Chunk(id)
			if err != nil {
				return err
			}
			locs = append(locs, c.Loc)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return locs
}

// TestSharedPackBytesJournaled: the new chunks of small files appended to
// a shared pack travel in the journal, not through an fsync of the pack.
// A crash that loses every unsynced byte of the pack (its name was synced
// when it was made) before a checkpoint loses nothing: the reopened store
// writes the bytes back from the journal. A checkpoint syncs the pack and
// forgets it.
func TestSharedPackBytesJournaled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	files := map[string][]byte{}
	for i, n := range []int{1, 4095, 65536, 70_001, 1 << 20} {
		name := string(rune('a' + i))
		files[name] = journalTestBytes(n, uint64(i+20))
		putBytes(t, s, name, files[name])
	}
	packs := map[uint32]bool{}
	for name := range files {
		for _, l := range chunkLocs(t, s, name) {
			packs[l.Pack] = true
		}
	}
	s.inline.mu.Lock()
	for pack := range packs {
		if !s.inline.dirty[pack] {
			t.Errorf("pack %d of the small files is not waiting for a checkpoint's sync", pack)
		}
	}
	s.inline.mu.Unlock()

	crash := filepath.Join(t.TempDir(), "store")
	copyTree(t, dir, crash)
	for pack := range packs {
		// Everything written since the pack was made, lost.
		if err := os.Truncate(filepath.Join(crash, "packs", filepath.Base(s.packPath(pack))), 0); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(crash, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for name, want := range files {
		if !bytes.Equal(readAll(t, s2, name), want) {
			t.Errorf("%s reads back wrong after the crash", name)
		}
	}
	if err := s2.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}

	if err := s.db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	s.inline.mu.Lock()
	defer s.inline.mu.Unlock()
	if len(s.inline.dirty) != 0 {
		t.Fatalf("packs still waiting after a checkpoint: %v", s.inline.dirty)
	}
}

// TestFailedJournaledIngestTaintsPack: an ingest whose bytes went into the
// journal and whose commit then failed leaves its data record behind,
// which the next open replays. Its pack offsets past the committed length
// must not be handed out again until a checkpoint covers the record:
// otherwise the replay would write the failed ingest's bytes over those of
// a later file that reused them (here one large enough to be fsynced in
// its pack, not journaled).
func TestFailedJournaledIngestTaintsPack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := journalTestBytes(8192, 1)
	putBytes(t, s, "f", first)
	pack := chunkLocs(t, s, "f")[0].Pack
	// f is a file: the commit of f/x fails after its bytes were written
	// and journaled.
	lost := journalTestBytes(200_000, 2)
	if _, _, err := s.Put(context.Background(), bytes.NewReader(lost), int64(len(lost)), "f/x", PutOptions{}); err == nil {
		t.Fatal("put under a file succeeded")
	}
	if !s.tainted(pack) {
		t.Fatalf("pack %d not tainted after a failed journaled ingest", pack)
	}
	// Larger than what is journaled: fsynced in its pack.
	big := journalTestBytes(3<<20+5, 3)
	putBytes(t, s, "big", big)
	for _, l := range chunkLocs(t, s, "big") {
		if l.Pack == pack {
			t.Errorf("big was placed in the tainted pack %d at %d", pack, l.Off)
		}
	}
	crash := filepath.Join(t.TempDir(), "store")
	copyTree(t, dir, crash)
	s2, err := Open(crash, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s2, "big"), big) || !bytes.Equal(readAll(t, s2, "f"), first) {
		t.Error("files read back wrong after replaying a failed ingest's record")
	}
	if err := s2.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Error(err)
	}
	// At open, the replayed record wrote past the committed length: the
	// pack stays tainted until a checkpoint.
	if !s2.tainted(pack) {
		t.Errorf("pack %d not tainted after replaying a record past its committed length", pack)
	}
	putBytes(t, s2, "later", journalTestBytes(3<<20+7, 4))
	if err := s2.db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s2.tainted(pack) {
		t.Errorf("pack %d still tainted after a checkpoint", pack)
	}
	s2.Close()

	if err := s.db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s.tainted(pack) {
		t.Fatalf("pack %d still tainted after a checkpoint", pack)
	}
}
