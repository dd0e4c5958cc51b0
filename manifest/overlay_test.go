package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// modelBuckets are the buckets the model test writes: directory entries
// (8-byte values, so that ReadDir and Lookup read them), attributes, and
// orphans (empty values).
var modelBuckets = [][]byte{bucketDirents, bucketXattrs, bucketOrphans}

// state is the model of those buckets: per bucket, key → value.
type state [3]map[string]string

func newState() state { return state{{}, {}, {}} }

func (s state) clone() state {
	return state{maps.Clone(s[0]), maps.Clone(s[1]), maps.Clone(s[2])}
}

// sorted returns bucket i's keys in order.
func (s state) sorted(i int) []string { return slices.Sorted(maps.Keys(s[i])) }

// modelKey is a key of a small space, so that puts, deletes and scans
// collide: an inode number (prefix) and a short name.
func modelKey(r *rand.Rand) []byte {
	return append(u64key(uint64(r.IntN(4)+1)), fmt.Sprintf("k%d", r.IntN(8))...)
}

func modelValue(r *rand.Rand, b int) []byte {
	switch b {
	case 0:
		return u64key(r.Uint64N(1000))
	case 2:
		return []byte{}
	}
	return bytes.Repeat([]byte{byte('a' + r.IntN(26))}, r.IntN(12))
}

// checkState compares a transaction's view of the model buckets with s:
// a full scan of each (ForEach and a cursor), Seek at random places,
// Get, and the package's own readers (ReadDir, Lookup, Xattrs, IsOrphan).
// With nilEmpty, a value put empty may read as nil: bbolt's write
// transactions give back the nil that AddOrphan puts until the commit
// (then it reads as empty, as journal mode gives it at once).
func checkState(tx *Tx, s state, r *rand.Rand, nilEmpty bool) error {
	for i, name := range modelBuckets {
		want := s.sorted(i)
		var got []string
		err := tx.b(name).ForEach(func(k, v []byte) error {
			if s[i][string(k)] != string(v) {
				return fmt.Errorf("bucket %s key %x: value %q, want %q", name, k, v, s[i][string(k)])
			}
			if v == nil && !nilEmpty {
				return fmt.Errorf("bucket %s key %x: nil value", name, k)
			}
			got = append(got, string(k))
			return nil
		})
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("bucket %s: keys %q, want %q", name, got, want)
		}
		for range 4 {
			seek := modelKey(r)
			if r.IntN(3) == 0 {
				seek = seek[:8]
			}
			c := tx.b(name).Cursor()
			k, v := c.Seek(seek)
			at, _ := slices.BinarySearch(want, string(seek))
			for ; at < len(want); at++ {
				if k == nil || string(k) != want[at] || string(v) != s[i][want[at]] {
					return fmt.Errorf("bucket %s: scan from %x met %x %q, want %x", name, seek, k, v, want[at])
				}
				k, v = c.Next()
			}
			if k != nil {
				return fmt.Errorf("bucket %s: scan from %x went on to %x", name, seek, k)
			}
			key := modelKey(r)
			wv, ok := s[i][string(key)]
			if gv := tx.b(name).Get(key); ((gv != nil) != ok && !(nilEmpty && wv == "")) || string(gv) != wv {
				return fmt.Errorf("bucket %s: Get(%x) = %q, want %q (%v)", name, key, gv, wv, ok)
			}
		}
	}
	for ino := uint64(1); ino <= 4; ino++ {
		prefix := string(u64key(ino))
		var ents []Dirent
		var xs []XattrEntry
		for _, k := range s.sorted(0) {
			if strings.HasPrefix(k, prefix) {
				ents = append(ents, Dirent{Name: k[8:], Ino: binary.BigEndian.Uint64([]byte(s[0][k]))})
			}
		}
		for _, k := range s.sorted(1) {
			if strings.HasPrefix(k, prefix) {
				xs = append(xs, XattrEntry{Name: k[8:], Size: len(s[1][k])})
			}
		}
		if got, _ := tx.ReadDir(ino); !slices.Equal(got, ents) {
			return fmt.Errorf("ReadDir(%d) = %v, want %v", ino, got, ents)
		}
		if tx.Empty(ino) != (len(ents) == 0) {
			return fmt.Errorf("Empty(%d) = %v with %d entries", ino, tx.Empty(ino), len(ents))
		}
		for _, e := range ents {
			if got, err := tx.Lookup(ino, e.Name); err != nil || got != e.Ino {
				return fmt.Errorf("Lookup(%d, %q) = %d, %v; want %d", ino, e.Name, got, err, e.Ino)
			}
		}
		if got := tx.Xattrs(ino); !slices.Equal(got, xs) {
			return fmt.Errorf("Xattrs(%d) = %v, want %v", ino, got, xs)
		}
		_, orphan := s[2][prefix]
		if tx.IsOrphan(ino) != orphan && !nilEmpty {
			return fmt.Errorf("IsOrphan(%d) = %v, want %v", ino, tx.IsOrphan(ino), orphan)
		}
	}
	return nil
}

// mutate makes a few random changes in tx and in s alike: puts, deletes
// (of keys present or not), deletes through a cursor, DeleteXattrs,
// AddOrphan.
func mutate(tx *Tx, s state, r *rand.Rand) error {
	for range 1 + r.IntN(6) {
		i := r.IntN(3)
		b := tx.b(modelBuckets[i])
		k := modelKey(r)
		switch op := r.IntN(10); {
		case op < 5:
			v := modelValue(r, i)
			if err := b.Put(k, v); err != nil {
				return err
			}
			s[i][string(k)] = string(v)
		case op < 7:
			if err := b.Delete(k); err != nil {
				return err
			}
			delete(s[i], string(k))
		case op < 8:
			c := b.Cursor()
			if k, _ := c.Seek(k[:8]); k != nil {
				if err := c.Delete(); err != nil {
					return err
				}
				delete(s[i], string(k))
			}
		case op < 9:
			ino := uint64(r.IntN(4) + 1)
			if err := tx.DeleteXattrs(ino); err != nil {
				return err
			}
			for k := range s[1] {
				if strings.HasPrefix(k, string(u64key(ino))) {
					delete(s[1], k)
				}
			}
		default:
			ino := uint64(r.IntN(4) + 1)
			if err := tx.AddOrphan(ino); err != nil {
				return err
			}
			s[2][string(u64key(ino))] = ""
		}
	}
	return nil
}

var errAbort = errors.New("abort")

// TestJournalModel drives a journal-mode DB and a map model through random
// transactions (some aborted), views, syncs, checkpoints (some cut short
// after the bbolt commit, as by a crash), crashes that lose what the log
// did not sync, and clean reopenings; after each step the DB must read as
// the model: after a crash, as the model did at the last record that was
// synced or checkpointed. Half the runs bound the overlay at a few
// entries, so that background checkpoints and checkpoints during replay
// happen too.
func TestJournalModel(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 300, true) })
	}
}

// TestPlainModel runs the model test in plain mode: it checks the model
// (and so the semantics that journal mode must match: empty values,
// cursors, ReadDir, Xattrs) against bbolt itself, where every commit is
// durable.
func TestPlainModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 200, false) })
	}
}

func runModel(t *testing.T, seed uint64, steps int, journaled bool) {
	r := rand.New(rand.NewPCG(seed, 99))
	path := filepath.Join(t.TempDir(), "kvfs.db")
	log := &memLog{}
	var crashAfter atomic.Bool
	opts := JournalOptions{Log: log, MaxEntries: -1, MaxBytes: -1, Interval: -1, Logger: slog.New(slog.DiscardHandler),
		AfterCheckpoint: func(uint64) error {
			if crashAfter.Load() {
				return errors.New("crash before truncate")
			}
			return nil
		}}
	if seed%2 == 1 {
		opts.MaxEntries = 3 + int(seed)
	}
	var mode []Option
	if journaled {
		mode = append(mode, WithJournal(opts))
	}
	db, err := Open(path, true, Params{ChunkSize: 4096}, time.Second, mode...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	model := newState()
	history := map[uint64]state{0: newState()} // state as of each record
	var last uint64
	reopen := func() {
		t.Helper()
		if db, err = Open(path, false, Params{}, time.Second, mode...); err != nil {
			t.Fatalf("reopen: %v", err)
		}
	}
	crash := func() {
		t.Helper()
		db.crashClose()
		if journaled { // in plain mode every commit is durable
			durable := max(log.synced, db.j.ckptSeq.Load())
			log.crash()
			model = history[durable].clone()
			for s := range history {
				if s > durable {
					delete(history, s)
				}
			}
			last = durable
		}
		reopen()
	}
	for step := range steps {
		op := r.IntN(100)
		switch {
		case op < 55:
			pending := model.clone()
			abort := r.IntN(10) == 0
			seq, err := db.UpdateSeq(func(tx *Tx) error {
				if err := mutate(tx, pending, r); err != nil {
					return err
				}
				if err := checkState(tx, pending, r, !journaled); err != nil {
					return fmt.Errorf("inside the transaction: %w", err)
				}
				if abort {
					return errAbort
				}
				return nil
			})
			if abort {
				if !errors.Is(err, errAbort) {
					t.Fatalf("step %d: aborted update: %v", step, err)
				}
				break
			}
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if seq != last {
				if seq < last {
					t.Fatalf("step %d: sequence number %d after %d", step, seq, last)
				}
				last = seq
				history[seq] = pending.clone()
			}
			model = pending
		case op < 75:
			if err := db.View(func(tx *Tx) error { return checkState(tx, model, r, false) }); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		case op < 83:
			if err := db.Sync(r.Uint64N(last + 1)); err != nil {
				t.Fatalf("step %d: sync: %v", step, err)
			}
		case op < 89:
			if err := db.Checkpoint(); err != nil {
				t.Fatalf("step %d: checkpoint: %v", step, err)
			}
		case op < 92:
			crashAfter.Store(true)
			if err := db.Checkpoint(); err == nil && journaled && db.j.ckptSeq.Load() != last {
				t.Fatalf("step %d: checkpoint did not run its hook", step)
			}
			crashAfter.Store(false)
			crash()
		case op < 97:
			crash()
		default:
			if err := db.Close(); err != nil {
				t.Fatalf("step %d: close: %v", step, err)
			}
			if n := len(log.recs); n != 0 {
				t.Fatalf("step %d: %d journal records left after a clean close", step, n)
			}
			reopen()
		}
		if op >= 89 {
			if err := db.View(func(tx *Tx) error { return checkState(tx, model, r, false) }); err != nil {
				t.Fatalf("step %d: after reopening: %v", step, err)
			}
		}
	}
}

// TestJournalFileLog: records in a log file survive a crash of the DB and
// are replayed by the next open; a clean close leaves the log empty.
func TestJournalFileLog(t *testing.T) {
	dir := t.TempDir()
	open := func() (*DB, *fileLog) {
		l, err := openFileLog(filepath.Join(dir, "journal"))
		if err != nil {
			t.Fatal(err)
		}
		db, err := Open(filepath.Join(dir, "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second, WithJournal(JournalOptions{Log: l}))
		if err != nil {
			t.Fatal(err)
		}
		return db, l
	}
	db, l := open()
	for i := range 50 {
		err := db.UpdateSync(func(tx *Tx) error {
			ino, err := tx.NextIno()
			if err != nil {
				return err
			}
			if err := tx.PutInode(&Inode{Ino: ino, Mode: 0o644, Parent: RootIno, Name: fmt.Sprint("f", i)}); err != nil {
				return err
			}
			return tx.Link(RootIno, fmt.Sprint("f", i), ino)
		})
		if err != nil {
			t.Fatal(err)
		}
		if i == 20 {
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	db.crashClose()
	l.Close()
	db, l = open()
	check := func() {
		err := db.View(func(tx *Tx) error {
			ents, _ := tx.ReadDir(RootIno)
			if len(ents) != 50 {
				return fmt.Errorf("%d entries after replay, want 50", len(ents))
			}
			for _, e := range ents {
				if n, err := tx.Inode(e.Ino); err != nil || n.Name != e.Name {
					return fmt.Errorf("entry %q: inode %+v, %v", e.Name, n, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	l.Replay(0, func(uint64, []byte) error { n++; return nil })
	if n != 0 {
		t.Fatalf("%d records left after a clean close", n)
	}
	l.Close()
	db, l = open()
	defer l.Close()
	defer db.Close()
	check()
}

// TestJournalConcurrent runs writers, explicit and background checkpoints
// and readers at once (run it under -race). Writers move amounts between
// accounts (an account that reaches zero is deleted: a tombstone) and set
// two keys to the same counter; every View must see the total unchanged,
// the two keys equal, and the counter never going back.
func TestJournalConcurrent(t *testing.T) {
	const accounts, total = 16, 1600
	db, err := Open(filepath.Join(t.TempDir(), "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second,
		WithJournal(JournalOptions{Log: &memLog{}, MaxEntries: 8, Interval: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acct := func(i int) []byte { return []byte(fmt.Sprintf("acct%02d", i)) }
	err = db.Update(func(tx *Tx) error {
		for i := range accounts {
			if err := tx.b(bucketChunks).Put(acct(i), u64key(total/accounts)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var writers, others sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for n := 0; n < 1000; n++ {
				err := db.Update(func(tx *Tx) error {
					b := tx.b(bucketChunks)
					from, to := acct(r.IntN(accounts)), acct(r.IntN(accounts))
					have, amount := getU64(b, from), uint64(r.IntN(40))
					if bytes.Equal(from, to) || have < amount {
						return nil
					}
					if have == amount {
						if err := b.Delete(from); err != nil {
							return err
						}
					} else if err := putU64(b, from, have-amount); err != nil {
						return err
					}
					if err := putU64(b, to, getU64(b, to)+amount); err != nil {
						return err
					}
					x := tx.b(bucketXattrs)
					c := getU64(x, []byte("pairA")) + 1
					if err := putU64(x, []byte("pairA"), c); err != nil {
						return err
					}
					return putU64(x, []byte("pairB"), c)
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	others.Add(1)
	go func() {
		defer others.Done()
		for !stop.Load() {
			if err := db.Checkpoint(); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 3 {
		others.Add(1)
		go func() {
			defer others.Done()
			var seen uint64
			for !stop.Load() {
				err := db.View(func(tx *Tx) error {
					sum := uint64(0)
					tx.b(bucketChunks).ForEach(func(k, v []byte) error {
						sum += binary.BigEndian.Uint64(v)
						return nil
					})
					if sum != total {
						return fmt.Errorf("accounts sum to %d, want %d", sum, total)
					}
					x := tx.b(bucketXattrs)
					a, b := getU64(x, []byte("pairA")), getU64(x, []byte("pairB"))
					var scanned []uint64
					x.ForEach(func(_, v []byte) error { scanned = append(scanned, binary.BigEndian.Uint64(v)); return nil })
					if a != b || (a != 0 && !slices.Equal(scanned, []uint64{a, b})) {
						return fmt.Errorf("pair %d, %d; scanned %v", a, b, scanned)
					}
					if a < seen {
						return fmt.Errorf("counter went back from %d to %d", seen, a)
					}
					seen = a
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	writers.Wait()
	stop.Store(true)
	others.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	err = db.View(func(tx *Tx) error {
		sum := uint64(0)
		tx.b(bucketChunks).ForEach(func(k, v []byte) error { sum += binary.BigEndian.Uint64(v); return nil })
		if c := getU64(tx.b(bucketXattrs), []byte("pairA")); c < 1000 || sum != total {
			return fmt.Errorf("in the end: counter %d, sum %d", c, sum)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestJournalSnapshotPairing: a bbolt read transaction begun before a
// checkpoint's commit must not be paired with an overlay version from
// after that checkpoint's drop (it would miss the entries dropped: they
// are in neither); a read transaction begun after may.
func TestJournalSnapshotPairing(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second,
		WithJournal(JournalOptions{Log: &memLog{}, Interval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A checkpoint that grows bbolt's map waits for every read
	// transaction (bbolt's remap): grow it first, so that the one below,
	// run while this test holds a read transaction, does not.
	err = db.Update(func(tx *Tx) error {
		for i := range 2000 {
			if err := tx.b(bucketChunks).Put(u64key(uint64(i)), make([]byte, 1024)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || db.Checkpoint() != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error { return tx.Link(RootIno, "a", 5) }); err != nil {
		t.Fatal(err)
	}
	before, err := db.bolt.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Rollback()
	if _, ok := db.versionFor(before); !ok {
		t.Fatal("a version refused before any checkpoint")
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	v, ok := db.versionFor(before)
	if ok {
		t.Fatal("a version without the checkpointed entries was paired with a bbolt state without them")
	}
	if _, err := (&Tx{tx: before, j: &jtx{v: v}}).Lookup(RootIno, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused pair would have found the entry (%v): the test shows nothing", err)
	}
	err = db.View(func(tx *Tx) error {
		_, err := tx.Lookup(RootIno, "a")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestJournalCheckpointHooks: BeforeCheckpoint runs before the bbolt
// commit, AfterCheckpoint after it and before the journal is truncated;
// an UpdateSeq that changes nothing returns the last record's number
// (so that its Sync covers what it read); Sync of a checkpointed number
// does not reach the log.
func TestJournalCheckpointHooks(t *testing.T) {
	log := &memLog{}
	var db *DB
	inBolt := func() bool {
		found := false
		db.bolt.View(func(tx *bolt.Tx) error {
			found = tx.Bucket(bucketDirents).Get(direntKey(RootIno, "a")) != nil
			return nil
		})
		return found
	}
	var calls []string
	opts := JournalOptions{Log: log, Interval: -1,
		BeforeCheckpoint: func(seq uint64) error {
			calls = append(calls, fmt.Sprintf("before %d in bbolt %v records %d", seq, inBolt(), len(log.recs)))
			return nil
		},
		AfterCheckpoint: func(seq uint64) error {
			calls = append(calls, fmt.Sprintf("after %d in bbolt %v records %d", seq, inBolt(), len(log.recs)))
			return nil
		}}
	db, err := Open(filepath.Join(t.TempDir(), "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second, WithJournal(opts))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seq, err := db.UpdateSeq(func(tx *Tx) error { return tx.Link(RootIno, "a", 7) })
	if err != nil || seq != 1 {
		t.Fatalf("seq %d, %v", seq, err)
	}
	if again, err := db.UpdateSeq(func(tx *Tx) error { _, err := tx.Lookup(RootIno, "a"); return err }); err != nil || again != seq {
		t.Fatalf("read-only update: seq %d, %v; want %d", again, err, seq)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	want := []string{"before 1 in bbolt false records 1", "after 1 in bbolt true records 1"}
	if !slices.Equal(calls, want) {
		t.Fatalf("hooks: %q, want %q", calls, want)
	}
	if len(log.recs) != 0 {
		t.Fatalf("%d records after the checkpoint", len(log.recs))
	}
	if err := db.Sync(seq); err != nil || log.synced != 0 {
		t.Fatalf("sync of a checkpointed record: %v, log synced to %d", err, log.synced)
	}
	// A failed AfterCheckpoint leaves the journal as it was, and the next
	// checkpoint, with nothing new to apply, calls it again.
	fail := errors.New("punch failed")
	opts.AfterCheckpoint = func(uint64) error { return fail }
	db.j.opts.AfterCheckpoint = opts.AfterCheckpoint
	if _, err := db.UpdateSeq(func(tx *Tx) error { return tx.Link(RootIno, "b", 8) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); !errors.Is(err, fail) || len(log.recs) != 1 {
		t.Fatalf("failed hook: %v, %d records", err, len(log.recs))
	}
	var again []uint64
	db.j.opts.AfterCheckpoint = func(seq uint64) error { again = append(again, seq); return nil }
	if err := db.Checkpoint(); err != nil || !slices.Equal(again, []uint64{2}) || len(log.recs) != 0 {
		t.Fatalf("retry: %v, hook calls %v, %d records", err, again, len(log.recs))
	}
}

// TestJournalCloseWithoutCheckpoint: when Close cannot checkpoint (here
// BeforeCheckpoint fails, as a pack sync on a failing disk would), it
// syncs the journal instead, and the next open replays it.
func TestJournalCloseWithoutCheckpoint(t *testing.T) {
	log := &memLog{}
	path := filepath.Join(t.TempDir(), "kvfs.db")
	fail := errors.New("pack sync failed")
	opts := JournalOptions{Log: log, Interval: -1, BeforeCheckpoint: func(uint64) error { return fail }}
	db, err := Open(path, true, Params{ChunkSize: 4096}, time.Second, WithJournal(opts))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error { return tx.Link(RootIno, "a", 7) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); !errors.Is(err, fail) {
		t.Fatalf("close: %v", err)
	}
	log.crash()
	opts.BeforeCheckpoint = nil
	if db, err = Open(path, false, Params{}, time.Second, WithJournal(opts)); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *Tx) error {
		ino, err := tx.Lookup(RootIno, "a")
		if err == nil && ino != 7 {
			err = fmt.Errorf("ino %d", ino)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
