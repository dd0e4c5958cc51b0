package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/manifest"
)

// damagedStore writes files into a new store, closes it, and returns the
// store's directory, the files and the pack that holds them.
func damagedStore(t *testing.T) (dir string, files map[string][]byte, pack uint32) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	files = map[string][]byte{}
	for i, n := range []int{70_001, 300_000, 5000} {
		name := string(rune('a' + i))
		files[name] = journalTestBytes(n, uint64(40+i))
		putBytes(t, s, name, files[name])
	}
	pack = chunkLocs(t, s, "a")[0].Pack
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, files, pack
}

func readBack(t *testing.T, s *Store, files map[string][]byte) {
	t.Helper()
	for name, want := range files {
		if !bytes.Equal(readAll(t, s, name), want) {
			t.Errorf("%s reads back wrong", name)
		}
	}
}

// TestDamagedCommittedLength: an index whose record of a pack says it is
// shorter than the chunks it holds (a damaged index: the file is intact)
// must not make the store cut the pack at open, as it cuts an
// uncommitted tail: every file still reads, the pack takes no new ingest,
// and Problems reports the pack's record, not lost chunks; Repair raises
// the committed length, after which the store checks clean.
func TestDamagedCommittedLength(t *testing.T) {
	dir, files, pack := damagedStore(t)
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *manifest.Tx) error {
		p, err := tx.Pack(pack)
		if err != nil {
			return err
		}
		p.Committed = 100
		return tx.PutPack(pack, p)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, err := os.Stat(filepath.Join(dir, "packs", filepath.Base(s.packPath(pack))))
	if err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(filepath.Join(dir, "packs", filepath.Base(s.packPath(pack))))
	if err != nil {
		t.Fatalf("open removed the pack: %v", err)
	}
	if after.Size() != before.Size() {
		t.Fatalf("open cut the pack: %d bytes, was %d", after.Size(), before.Size())
	}
	readBack(t, s, files)
	if !s.tainted(pack) {
		t.Error("the pack with a damaged length takes new ingests")
	}
	ctx := context.Background()
	problems, err := s.Problems(ctx, CheckOptions{Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Fatal("no problem reported")
	}
	for _, p := range problems {
		if p.Kind == ProblemLost {
			t.Errorf("a chunk reported lost: %s", p.Msg)
		}
	}
	if _, err := s.Repair(ctx, problems); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatalf("after repair: %v", err)
	}
	readBack(t, s, files)
	s.Close()
}

// TestSymlinkedPack: a pack file moved elsewhere and linked into packs/
// (as a user may move a pack to another disk) reads through the link, and
// the checks measure the linked file, not the link: nothing is lost.
func TestSymlinkedPack(t *testing.T) {
	dir, files, pack := damagedStore(t)
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := s.packPath(pack)
	s.Close()
	moved := filepath.Join(t.TempDir(), filepath.Base(p))
	if err := os.Rename(p, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, p); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	readBack(t, s, files)
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
