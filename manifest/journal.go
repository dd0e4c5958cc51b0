package manifest

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Log is the write-ahead journal that journal mode commits to (the
// journal package provides one). Its contract:
//
//   - Append stores one record and returns its sequence number, which is
//     greater than every number it returned before, and greater than the
//     upto of every Truncate before it (also across reopening). It need
//     not make the record durable.
//   - Sync(seq) returns once every record up to seq is durable. A seq
//     that is durable already, or truncated, returns at once.
//   - A crash loses at most a suffix of the records appended: if a record
//     survives, all before it (not truncated) survive.
//   - Replay(after, fn) calls fn with each record after the given
//     sequence number, in order; the payload is valid only during the
//     call.
//   - Truncate(upto) tells the log that records up to upto are no longer
//     needed (bbolt holds them).
type Log interface {
	Append(payload []byte) (seq uint64, err error)
	Sync(seq uint64) error
	Replay(after uint64, fn func(seq uint64, payload []byte) error) error
	Truncate(upto uint64) error
}

// JournalOptions turn on journal mode (see doc.go).
type JournalOptions struct {
	// Log receives a record per committed transaction. The DB does not
	// close it.
	Log Log
	// A checkpoint starts in the background when the overlay holds more
	// than MaxEntries entries or MaxBytes bytes (about), when more than
	// MaxBytes of records were appended since the last, or Interval after
	// the last one; zero values take the defaults (64 Ki entries, 64 MiB,
	// 30 s); a negative one turns that trigger off.
	MaxEntries int
	MaxBytes   int64
	Interval   time.Duration
	// BeforeCheckpoint, if set, runs before a checkpoint's bbolt
	// transaction, with the sequence number it will apply up to (the
	// store syncs the packs that the records up to it wrote into). An
	// error stops the checkpoint.
	BeforeCheckpoint func(seq uint64) error
	// AfterCheckpoint, if set, runs once bbolt holds every record up to
	// seq, before the journal is truncated (the store punches the chunks
	// those records freed: irreversible effects wait until the release is
	// durable). An error leaves the journal untruncated (the records are
	// replayed again, harmlessly, if the store crashes), and the next
	// checkpoint calls it again with the same or a later seq. It may run
	// during Open, when replay meets more records than the bound; it is
	// not called for a checkpoint that a crash cut short (the store
	// reconciles at open). It must not call Checkpoint or Close.
	AfterCheckpoint func(seq uint64) error
	// ReplayData, if set, receives at open the records after the last
	// checkpoint that begin with RecordData: records the caller appended
	// to the Log itself (the store's chunk bytes), in order with the
	// index's own. The index does not interpret them; the caller must
	// make what they describe durable before a checkpoint covers them
	// (BeforeCheckpoint), since the log drops them then.
	ReplayData func(seq uint64, payload []byte) error
	// Logger receives the errors of background checkpoints (default
	// slog.Default()).
	Logger *slog.Logger
}

// RecordData is the first byte of a record that the caller appends to the
// Log beside the index's records (ReplayData); the index's own records
// begin with their version (recordV1).
const RecordData = 0x80

// Option is an option of Open.
type Option func(*openOptions)

type openOptions struct {
	journal *JournalOptions
}

// WithJournal opens the index in journal mode.
func WithJournal(o JournalOptions) Option {
	return func(oo *openOptions) { oo.journal = &o }
}

// keyJournalSeq, in the meta bucket, is the sequence number of the last
// journal record that bbolt holds: the checkpoint that applied it wrote it
// in the same transaction.
var keyJournalSeq = []byte("journalSeq")

// journal is the state of journal mode.
type journal struct {
	opts JournalOptions

	// writeMu serializes writers and the publishing of versions.
	writeMu sync.Mutex
	cur     atomic.Pointer[version]
	// ckptMu serializes checkpoints; ckptSeq is the last one's sequence
	// number.
	ckptMu  sync.Mutex
	ckptSeq atomic.Uint64
	// finished is the last checkpoint whose AfterCheckpoint and
	// truncation are done (guarded by ckptMu).
	finished uint64

	kick chan struct{} // wakes the checkpointer (buffered, 1)
	// logged counts the record bytes appended since the last checkpoint
	// began: the overlay stays small while the same few keys change over
	// and over (renames back and forth), but the journal grows, and only
	// checkpoints let it recycle its segments.
	logged atomic.Int64
	stop   chan struct{}
	done   chan struct{}
}

// dropBatch bounds how many entries a checkpoint drops from the overlay
// per hold of the writer lock.
const dropBatch = 4096

// openJournal starts journal mode on an open bbolt: the overlay is
// rebuilt from the records after the last checkpoint. Rebuilding the
// overlay rather than applying the records to bbolt at once keeps an open
// free of writes (a store on a full disk still opens) and replays through
// the same code as a commit; if the records exceed the overlay's bound,
// they are checkpointed as replay goes.
func (db *DB) openJournal(o JournalOptions) error {
	if o.Log == nil {
		return errors.New("journal mode without a log")
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = 64 << 10
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 64 << 20
	}
	if o.Interval == 0 {
		o.Interval = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	j := &journal{opts: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	var s uint64
	db.bolt.View(func(tx *bolt.Tx) error {
		s = getU64(tx.Bucket(bucketMeta), keyJournalSeq)
		return nil
	})
	j.cur.Store(&version{seq: s, dropped: s})
	j.ckptSeq.Store(s)
	j.finished = s
	db.j = j
	// Records up to s are in bbolt; truncating them also tells the log
	// to number the next records after s, should it have lost its tail.
	if s > 0 {
		if err := o.Log.Truncate(s); err != nil {
			return fmt.Errorf("truncate journal up to %d: %w", s, err)
		}
	}
	applied := false
	err := o.Log.Replay(s, func(seq uint64, payload []byte) error {
		v := j.cur.Load()
		if seq <= v.seq {
			if seq <= s {
				return nil // bbolt has it; the log kept it for its own reasons
			}
			return fmt.Errorf("journal record %d after record %d", seq, v.seq)
		}
		if len(payload) > 0 && payload[0] == RecordData {
			if o.ReplayData == nil {
				return fmt.Errorf("journal record %d: a data record, and no ReplayData", seq)
			}
			if err := o.ReplayData(seq, payload); err != nil {
				return fmt.Errorf("journal record %d: %w", seq, err)
			}
			return nil
		}
		m, err := decodeMutations(append([]byte(nil), payload...))
		if err != nil {
			return fmt.Errorf("journal record %d: %w", seq, err)
		}
		j.cur.Store(v.with(m, seq))
		if j.full() {
			applied = true
			return db.checkpointLocked(false)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay journal after %d: %w", s, err)
	}
	if applied {
		if err := db.checkpointLocked(true); err != nil {
			return err
		}
	}
	go db.checkpointer()
	return nil
}

// full reports whether the overlay has outgrown its bound.
func (j *journal) full() bool {
	v := j.cur.Load()
	return (j.opts.MaxEntries > 0 && v.entries > j.opts.MaxEntries) ||
		(j.opts.MaxBytes > 0 && (v.bytes > j.opts.MaxBytes || j.logged.Load() > j.opts.MaxBytes))
}

// checkpointer runs background checkpoints until Close.
func (db *DB) checkpointer() {
	j := db.j
	defer close(j.done)
	var tick <-chan time.Time
	if j.opts.Interval > 0 {
		t := time.NewTicker(j.opts.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-j.stop:
			return
		case <-j.kick:
		case <-tick:
		}
		if err := db.Checkpoint(); err != nil {
			j.opts.Logger.Error("manifest: background checkpoint", "index", db.path, "err", err)
		}
	}
}

// closeJournal stops the checkpointer and checkpoints what is left, so
// that a clean close leaves the journal empty. If the checkpoint fails,
// the journal is synced instead: a clean close loses nothing committed.
func (db *DB) closeJournal() error {
	close(db.j.stop)
	<-db.j.done
	err := db.Checkpoint()
	if err != nil {
		if serr := db.Sync(db.j.cur.Load().seq); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return err
}

// snapshot returns a consistent pair of a bbolt read transaction and an
// overlay version (see doc.go): bbolt first, then the version; and if the
// version lacks entries that a checkpoint dropped after that bbolt
// transaction began, both again (the checkpoint's bbolt commit is done by
// then, so the next try sees it).
func (db *DB) snapshot() (*bolt.Tx, *version, error) {
	for {
		tx, err := db.bolt.Begin(false)
		if err != nil {
			return nil, nil, fmt.Errorf("index %s: %w", db.path, err)
		}
		if v, ok := db.versionFor(tx); ok {
			return tx, v, nil
		}
		tx.Rollback()
	}
}

// versionFor returns the current overlay version, and whether it may be
// paired with tx, a bbolt read transaction begun before: whether tx
// includes every checkpoint whose entries the version no longer holds.
func (db *DB) versionFor(tx *bolt.Tx) (*version, bool) {
	v := db.j.cur.Load()
	return v, v.dropped <= getU64(tx.Bucket(bucketMeta), keyJournalSeq)
}

// UpdateSeq runs fn in a read-write transaction and commits it if fn
// returns nil. In journal mode the commit appends one journal record and
// publishes its mutations to the overlay, without waiting for the record
// to be durable: it returns a sequence number that Sync takes to wait for
// that, covering everything fn read and wrote (the last record's number
// if fn changed nothing). In plain mode it is Update, synced, and returns
// 0.
func (db *DB) UpdateSeq(fn func(*Tx) error) (uint64, error) {
	ch, done := db.watching()
	seq, err := db.updateSeq(fn, ch)
	done(err == nil)
	return seq, err
}

func (db *DB) updateSeq(fn func(*Tx) error, ch *Changes) (uint64, error) {
	if db.j == nil {
		err := db.bolt.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, ch: ch}) })
		db.allocate()
		return 0, err
	}
	j := db.j
	j.writeMu.Lock()
	defer j.writeMu.Unlock()
	btx, v, err := db.snapshot()
	if err != nil {
		return 0, err
	}
	defer btx.Rollback()
	jt := &jtx{v: v, w: &writes{}}
	if err := fn(&Tx{tx: btx, j: jt, ch: ch}); err != nil {
		return 0, err
	}
	if jt.w.n == 0 {
		return v.seq, nil
	}
	m := jt.w.mutations()
	rec := m.encode()
	j.logged.Add(int64(len(rec)))
	seq, err := j.opts.Log.Append(rec)
	if err != nil {
		return 0, fmt.Errorf("index %s: journal append: %w", db.path, err)
	}
	if seq <= v.seq {
		return 0, fmt.Errorf("index %s: journal gave sequence number %d after %d", db.path, seq, v.seq)
	}
	j.cur.Store(v.with(m, seq))
	if j.full() {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	return seq, nil
}

// Sync waits until every journal record up to seq is durable (nothing in
// plain mode, whose commits are synced).
func (db *DB) Sync(seq uint64) error {
	if db.j == nil || seq <= db.j.ckptSeq.Load() {
		return nil
	}
	if err := db.j.opts.Log.Sync(seq); err != nil {
		return fmt.Errorf("index %s: journal sync to %d: %w", db.path, seq, err)
	}
	return nil
}

// UpdateSync is UpdateSeq, then Sync: it returns once the transaction is
// durable.
func (db *DB) UpdateSync(fn func(*Tx) error) error {
	seq, err := db.UpdateSeq(fn)
	if err != nil {
		return err
	}
	return db.Sync(seq)
}

// Checkpoint applies the current overlay version to bbolt in one synced
// transaction, which also records the version's sequence number; then
// drops from the overlay the entries applied (those not changed since),
// runs AfterCheckpoint, and truncates the journal. Writers go on during
// the bbolt transaction. Nothing in plain mode.
func (db *DB) Checkpoint() error {
	if db.j == nil {
		return nil
	}
	db.j.ckptMu.Lock()
	defer db.j.ckptMu.Unlock()
	return db.checkpointLocked(true)
}

func (db *DB) checkpointLocked(truncate bool) error {
	j := db.j
	if v := j.cur.Load(); v.seq != j.ckptSeq.Load() {
		if err := db.apply(v); err != nil {
			return err
		}
	}
	// What follows the bbolt commit is retried by the next checkpoint
	// until it is done, even with nothing new to apply.
	s := j.ckptSeq.Load()
	if j.finished == s {
		return nil
	}
	if j.opts.AfterCheckpoint != nil {
		if err := j.opts.AfterCheckpoint(s); err != nil {
			return fmt.Errorf("checkpoint %s up to %d: after commit: %w", db.path, s, err)
		}
	}
	if !truncate {
		return nil
	}
	if err := j.opts.Log.Truncate(s); err != nil {
		return fmt.Errorf("checkpoint %s up to %d: truncate journal: %w", db.path, s, err)
	}
	j.finished = s
	return nil
}

// apply writes version v to bbolt, with its sequence number, in one
// synced transaction, then drops from the overlay the entries applied.
func (db *DB) apply(v *version) error {
	j := db.j
	j.logged.Store(0)
	if j.opts.BeforeCheckpoint != nil {
		if err := j.opts.BeforeCheckpoint(v.seq); err != nil {
			return fmt.Errorf("checkpoint %s up to %d: %w", db.path, v.seq, err)
		}
	}
	var applied []placed
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		applied = applied[:0]
		for i, t := range v.trees {
			if t == nil {
				continue
			}
			b := tx.Bucket(allBuckets[i])
			var err error
			t.Ascend(func(it item) bool {
				e := it.e
				if e.del {
					err = b.Delete(e.key)
				} else {
					err = b.Put(e.key, e.val)
				}
				applied = append(applied, placed{i, e})
				return err == nil
			})
			if err != nil {
				return fmt.Errorf("bucket %s: %w", allBuckets[i], err)
			}
		}
		return putU64(tx.Bucket(bucketMeta), keyJournalSeq, v.seq)
	})
	db.allocate()
	if err != nil {
		return fmt.Errorf("checkpoint %s up to %d: %w", db.path, v.seq, err)
	}
	j.ckptSeq.Store(v.seq)
	for len(applied) > 0 {
		n := min(len(applied), dropBatch)
		j.writeMu.Lock()
		j.cur.Store(j.cur.Load().without(applied[:n], v.seq))
		j.writeMu.Unlock()
		applied = applied[n:]
	}
	return nil
}
