package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
)

// TestCandidateTableConcurrent: the candidate table, kept by the change
// feed, gives the candidates a walk of the index gives, while commits,
// removals, renames, pins and unpins, reads (open files are no candidates)
// and flushes of uses run concurrently. Files are made of chunks from a
// small pool, so that commits and removals move shared chunks' refcounts
// between 1 and 2 (what a file frees changes with other files). Each check
// compares, in the read transaction a pass chooses in, every candidate of
// the table (and its bytes with those Exact reads) with those of a walk
// (candidates) in that same transaction, and the stored bytes.
// The in-memory state that no transaction covers (open files, uses not yet
// flushed) is held still during a check.
func TestCandidateTableConcurrent(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		t.Run(fmt.Sprintf("nojournal=%v", noJournal), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			if err := Init(dir, 4096); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, Options{NoJournal: noJournal})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			candTableStress(t, s)
		})
	}
}

func candTableStress(t *testing.T, s *Store) {
	pool := make([][]byte, 24)
	for i := range pool {
		pool[i] = journalTestBytes(4096, uint64(i)+100)
	}
	paths := make([]string, 0, 30)
	for d := range 3 {
		for f := range 10 {
			paths = append(paths, fmt.Sprintf("/d%d/f%d", d, f))
		}
	}
	put := func(r *rand.Rand, path string) error {
		var b []byte
		for range 1 + r.IntN(4) {
			b = append(b, pool[r.IntN(len(pool))]...)
		}
		_, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), path, PutOptions{})
		return err
	}
	r0 := rand.New(rand.NewPCG(1, 2))
	for _, p := range paths {
		if err := put(r0, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LiveBytes(); err != nil { // build the table
		t.Fatal(err)
	}

	var still sync.RWMutex // held still (Lock) during a check
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var held []*File
			defer func() {
				for _, f := range held {
					f.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := paths[r.IntN(len(paths))]
				switch op := r.IntN(10); {
				case op < 3:
					if err := put(r, p); err != nil {
						errs <- err
						return
					}
				case op < 4:
					s.Remove(p) // may be gone already
				case op < 5:
					s.Rename(p, paths[r.IntN(len(paths))])
				case op < 6:
					s.KeepPath(p, r.IntN(2) == 0)
				case op < 8:
					still.RLock()
					if f, err := s.Open(p); err == nil {
						buf := make([]byte, 4096)
						f.ReadAt(buf, 0)
						held = append(held, f)
					}
					still.RUnlock()
				case op < 9:
					still.RLock()
					if len(held) > 0 {
						i := r.IntN(len(held))
						held[i].Close()
						held = append(held[:i], held[i+1:]...)
					}
					still.RUnlock()
				default:
					still.RLock()
					err := s.FlushUses()
					still.RUnlock()
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	checks := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		still.Lock()
		err := checkCandTable(s)
		still.Unlock()
		if err != nil {
			t.Error(err)
			break
		}
		checks++
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := checkCandTable(s); err != nil {
		t.Error(err)
	}
	n, err := s.StoredBytes()
	if m, err2 := s.LiveBytes(); err != nil || err2 != nil || n != m {
		t.Errorf("stored bytes: walk %d, table %d (%v, %v)", n, m, err, err2)
	}
	t.Logf("%d checks", checks)
	if checks < 10 {
		t.Errorf("only %d checks", checks)
	}
}

// checkCandTable compares the table's candidates with a walk's, in one
// read transaction.
func checkCandTable(s *Store) error {
	return s.chooseFromTable(func(c TableChoice, tx *manifest.Tx) error {
		want, stored, err := s.candidates(tx)
		if err != nil {
			return err
		}
		if c.Stored != stored {
			return fmt.Errorf("table's stored bytes %d, walk's %d", c.Stored, stored)
		}
		byIno := map[uint64]Candidate{}
		for _, w := range want {
			byIno[w.Ino] = w
		}
		if len(c.Cands) != len(want) {
			return fmt.Errorf("table has %d candidates, walk %d: %+v, %+v", len(c.Cands), len(want), c.Cands, want)
		}
		for _, got := range c.Cands {
			table := got.Bytes
			if err := c.Exact(&got); err != nil {
				return err
			}
			if got.Bytes != table {
				return fmt.Errorf("inode %d frees %d bytes, the table says %d", got.Ino, got.Bytes, table)
			}
			if w, ok := byIno[got.Ino]; !ok || w != got {
				return fmt.Errorf("table's candidate %+v, walk's %+v (found %v)", got, w, ok)
			}
		}
		return nil
	})
}
