package store

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

func journalTestBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func putBytes(t *testing.T, s *Store, path string, b []byte) {
	t.Helper()
	if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), path, PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestJournalStartsOnExistingStore: a store written without the journal
// opens with it (a new journal directory), keeps its files, and is marked
// from then on: without its journal directory, or without the journal,
// it refuses to open, naming the directory, and goes on refusing.
func TestJournalStartsOnExistingStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{NoJournal: true})
	if err != nil {
		t.Fatal(err)
	}
	a := journalTestBytes(50_000, 1)
	putBytes(t, s, "a", a)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	jdir := filepath.Join(dir, "journal")
	if _, err := os.Stat(jdir); !os.IsNotExist(err) {
		t.Fatalf("a store opened without the journal has %s: %v", jdir, err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s, "a"), a) {
		t.Fatal("a changed")
	}
	b := journalTestBytes(30_000, 2)
	putBytes(t, s, "b", b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(jdir); err != nil {
		t.Fatalf("no journal after a journal-mode open: %v", err)
	}
	if _, err := Open(dir, Options{NoJournal: true}); err == nil || !strings.Contains(err.Error(), jdir) {
		t.Fatalf("open without the journal of a journaled store: %v, want an error naming %s", err, jdir)
	}
	if err := os.RemoveAll(jdir); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), jdir) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("open of a journaled store without its journal: %v, want an error naming %s", err, jdir)
		}
	}
}

// TestReconcilePunchesDeadRanges: a crash between a release and its punch
// (or one that dropped punches) leaves dead bytes in a pack that is still
// partly live. An open after an unclean close punches them, and only
// them.
func TestReconcilePunchesDeadRanges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := journalTestBytes(40_000, 3), journalTestBytes(40_000, 4)
	putBytes(t, s, "a", a)
	putBytes(t, s, "b", b)
	var locs []blockstore.Loc
	s.db.View(func(tx *manifest.Tx) error {
		n, err := tx.Inode(mustLookup(t, s, "a"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := tx.Manifest(n.Ino)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range m.Chunks() {
			c, err := tx.Chunk(id)
			if err != nil {
				t.Fatal(err)
			}
			locs = append(locs, c.Loc)
		}
		return nil
	})
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The crash: a's bytes back in place, as if never punched, and no
	// mark of a clean close.
	for _, l := range locs {
		f, err := os.OpenFile(s.packs.Path(l.Pack), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xAA}, int(l.Len)), l.Off); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := os.Remove(closedMarker(dir)); err != nil {
		t.Fatalf("no closed marker after a clean close: %v", err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, l := range locs {
		buf := make([]byte, l.Len)
		f, err := os.Open(s.packs.Path(l.Pack))
		if err != nil {
			t.Fatal(err)
		}
		f.ReadAt(buf, l.Off)
		f.Close()
		if !bytes.Equal(buf, make([]byte, l.Len)) {
			t.Fatalf("dead range %+v not punched at open", l)
		}
	}
	if !bytes.Equal(readAll(t, s, "b"), b) {
		t.Fatal("b changed")
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

func mustLookup(t *testing.T, s *Store, path string) uint64 {
	t.Helper()
	fi, err := s.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Ino
}

// TestNamespaceChangesSyncLater: a rename is committed without a sync
// (its record is past what the journal has made durable), a put syncs
// every record before its own, and Sync (a directory's fsync) makes a
// later rename durable.
func TestNamespaceChangesSyncLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	durable := func() uint64 {
		j, err := s.jlog.get()
		if err != nil {
			t.Fatal(err)
		}
		return j.Stats().Durable
	}
	putBytes(t, s, "a", journalTestBytes(10_000, 5))
	if err := s.Rename("a", "b"); err != nil {
		t.Fatal(err)
	}
	if d, last := durable(), s.Changes(); d >= last {
		t.Fatalf("a rename synced the journal (durable %d, last %d)", d, last)
	}
	putBytes(t, s, "c", journalTestBytes(10_000, 6))
	if d, last := durable(), s.Changes(); d < last {
		t.Fatalf("a put returned before its record was durable (durable %d, last %d)", d, last)
	}
	if err := s.Rename("c", "d"); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, last := durable(), s.Changes(); d < last {
		t.Fatalf("Sync left records not durable (durable %d, last %d)", d, last)
	}
}
