package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// copyTree copies a directory tree of regular files: what a crash
// leaves of a store that is open (the page cache's view).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			return nil // a journal segment being made in the background
		}
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestInlineBytesReplayed: a small adopted spool's bytes travel in the
// journal, not through a sync of the new pack. A crash that loses the
// pack file (never synced, nor its name) before a checkpoint loses
// nothing: the reopened store writes the bytes back from the journal,
// and the file reads back whole. A large one is synced as before and
// not journalled.
func TestInlineBytesReplayed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	// Small spools adopted, as before shared packs (AdoptMinBytes).
	s, err := Open(dir, Options{CheckpointInterval: -1, AdoptMinBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commit := func(name string, b []byte) uint32 {
		fi, err := s.CreateAt(manifest.RootIno, name, 0o644, s.owner)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := os.CreateTemp(filepath.Join(dir, "spool"), "w-")
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		if _, err := sp.Write(b); err != nil {
			t.Fatal(err)
		}
		_, st, err := s.CommitIno(context.Background(), fi.Ino, sp, int64(len(b)), CommitOptions{Mtime: time.Now(), Adopt: true})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Adopted {
			t.Fatalf("%s not adopted: %+v", name, st)
		}
		var pack uint32
		s.db.View(func(tx *manifest.Tx) error {
			m, err := tx.Manifest(fi.Ino)
			if err != nil {
				m, _ = tx.Manifest(mustLookup(t, s, name))
			}
			c, err := tx.Chunk(m.Chunks()[0])
			if err != nil {
				t.Fatal(err)
			}
			pack = c.Loc.Pack
			return nil
		})
		return pack
	}
	small := journalTestBytes(200_000, 7)
	smallPack := commit("small", small)
	large := journalTestBytes(3<<20, 8)
	commit("large", large)
	if s.inline.dirty[smallPack] != true {
		t.Fatalf("the small commit's pack %d is not waiting for a checkpoint's sync", smallPack)
	}
	if len(s.inline.dirty) != 1 {
		t.Fatalf("packs waiting for a checkpoint: %v, want only the small commit's", s.inline.dirty)
	}
	crash := filepath.Join(t.TempDir(), "store")
	copyTree(t, dir, crash)
	if err := os.Remove(filepath.Join(crash, "packs", fmt.Sprintf("%06d.pack", smallPack))); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(crash, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if !bytes.Equal(readAll(t, s2, "small"), small) || !bytes.Equal(readAll(t, s2, "large"), large) {
		t.Fatal("files read back wrong after the crash")
	}
	if err := s2.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	// A checkpoint syncs the pack and forgets it.
	if err := s.db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if len(s.inline.dirty) != 0 {
		t.Fatalf("packs still waiting after a checkpoint: %v", s.inline.dirty)
	}
}
