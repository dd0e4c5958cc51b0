package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/internal/bufpool"
	"github.com/kvfs/kvfs/journal"
	"github.com/kvfs/kvfs/manifest"
)

// The store runs its index in journal mode (manifest/doc.go): a commit
// appends one record to STORE/journal/ and is durable once that record
// is synced, and a background checkpoint writes many commits' worth to
// bbolt at once. What that changes here:
//
//   - Durability points. A file's commit (fsync, last close, put) syncs
//     the journal up to its record before it returns; concurrent
//     committers share one fdatasync (the journal's group commit).
//     Namespace changes (create, mkdir, rename, unlink, setattr, xattrs)
//     are committed without a sync: they are durable with the next sync
//     of anything (a file's fsync, a directory's fsync: Store.Sync), as on
//     a local disk; the journal is ordered, so a durable record implies
//     every earlier one.
//   - Chunk bytes: a commit with few new bytes (up to 1 MiB) carries them
//     in data records of the journal ahead of its own record, and the
//     packs they went to are synced by the next checkpoint (inline.go).
//     Other commits write and sync their packs before the commit's record
//     is appended, so a record never refers to bytes that a crash can
//     lose.
//   - Irreversible effects wait for the record that allows them.
//     Punching released chunks must not happen before the record that
//     released them is durable: a crash could lose the record and bring
//     back a manifest listing punched chunks. So punch syncs the journal
//     first (syncReleases), and a dead pack's file is removed only after
//     the record forgetting it is synced (dropDeadPacks). (Deferring the
//     punches to the next checkpoint would spare removals that sync, but
//     a full disk would then get no room back from a removal until the
//     checkpoint.)
//   - A crash between the sync and the punch leaves dead bytes (as it did
//     before the journal). Dead packs are found again at open (their index
//     record says so); the dead ranges of packs still partly live are
//     found by reconcile, which punches every committed byte of such a
//     pack that no chunk record covers. It runs at an open that does not
//     follow a clean close (the closed marker below).
//   - Once a store has used the journal, its index is marked (meta
//     "journaled") and it must always be opened with STORE/journal/: the
//     records after the last checkpoint live only there. Opening a marked
//     store whose journal directory is missing is an error naming it,
//     never a silent loss; Options.NoJournal refuses a marked store.

// journalDir is the journal's directory inside a store.
func journalDir(dir string) string { return filepath.Join(dir, "journal") }

// closedMarker is the file a clean Close leaves (every queued effect done);
// Open removes it, and reconciles when it is absent.
func closedMarker(dir string) string { return filepath.Join(dir, "closed-clean") }

// lazyLog is the journal as manifest.Log, opened on first use. The index
// calls it first from inside manifest.Open, after taking bbolt's file lock:
// journal recovery rewrites and syncs segments, which it must never do to
// the journal of a store that another process has open.
type lazyLog struct {
	open func() (*journal.Journal, error)

	once sync.Once
	j    *journal.Journal
	err  error
}

func (l *lazyLog) get() (*journal.Journal, error) {
	l.once.Do(func() { l.j, l.err = l.open() })
	return l.j, l.err
}

func (l *lazyLog) Append(p []byte) (uint64, error) {
	j, err := l.get()
	if err != nil {
		return 0, err
	}
	return j.Append(p)
}

// AppendDeferred is journal.Journal.AppendDeferred.
func (l *lazyLog) AppendDeferred(p []byte) (uint64, error) {
	j, err := l.get()
	if err != nil {
		return 0, err
	}
	return j.AppendDeferred(p)
}

func (l *lazyLog) Sync(seq uint64) error {
	j, err := l.get()
	if err != nil {
		return err
	}
	return j.Sync(seq)
}

func (l *lazyLog) Replay(after uint64, fn func(uint64, []byte) error) error {
	j, err := l.get()
	if err != nil {
		return err
	}
	return j.Replay(after, fn)
}

func (l *lazyLog) Truncate(upto uint64) error {
	j, err := l.get()
	if err != nil {
		return err
	}
	return j.Truncate(upto)
}

// Write is the journal's Write (manifest.Writer): a namespace change
// survives a crash of the daemon once its Update returns.
func (l *lazyLog) Write(seq uint64) error {
	j, err := l.get()
	if err != nil {
		return err
	}
	return j.Write(seq)
}

// close closes the journal if it was opened.
func (l *lazyLog) close() error {
	l.once.Do(func() { l.err = errors.New("journal never opened") })
	if l.j == nil {
		return nil
	}
	return l.j.Close()
}

// openIndex opens the store's index: in journal mode unless opts.NoJournal.
// created reports a journal directory made by this open (a store opened
// with the journal for the first time, or one whose journal is missing).
func (s *Store) openIndex(opts Options) (db *manifest.DB, created bool, err error) {
	path := filepath.Join(s.dir, "kvfs.db")
	if opts.NoJournal {
		db, err := manifest.Open(path, false, manifest.Params{}, opts.LockTimeout)
		if err != nil {
			return nil, false, err
		}
		var marked bool
		db.View(func(tx *manifest.Tx) error { marked = tx.Journaled(); return nil })
		if marked {
			db.Close()
			return nil, false, fmt.Errorf("the store uses a journal (%s): it cannot be opened without it", journalDir(s.dir))
		}
		return db, false, nil
	}
	jdir := journalDir(s.dir)
	s.inline.dirty = map[uint32]bool{}
	s.inline.bufs = bufpool.New(inlineBufMin, inlineBufMax, inlineBufKeep)
	seg := opts.JournalSegmentSize
	if seg <= 0 {
		seg = journalSegmentFor(s.dir)
	}
	// Checkpoints come every half segment's worth of records at most,
	// so that the journal recycles its segments instead of making new
	// ones: on a full disk there may be no room for one (the reserve
	// holds one more, for removals).
	s.inline.checkpointAt = min(inlineCheckpoint, seg/2)
	s.jlog = &lazyLog{open: func() (*journal.Journal, error) {
		if _, err := os.Stat(jdir); errors.Is(err, fs.ErrNotExist) {
			created = true
		}
		s.inline.max = min(inlineMax, int64(journalMaxPayload(seg))/2)
		_, err := os.Stat(closedMarker(s.dir))
		return journal.Open(jdir, journal.Options{SegmentSize: seg, MaxPayload: journalMaxPayload(seg), WriteThrough: true, Logger: s.log,
			NoSpace:     func(err error) bool { return s.reserve.release("new journal segment", err) },
			ClosedClean: err == nil, OnSync: opts.OnJournalSync})
	}}
	db, err = manifest.Open(path, false, manifest.Params{}, opts.LockTimeout, manifest.WithJournal(manifest.JournalOptions{
		Log:              s.jlog,
		BeforeCheckpoint: s.syncInline,
		ReplayData:       s.replayData,
		MaxEntries:       opts.CheckpointEntries,
		MaxBytes:         seg / 2,
		Interval:         opts.CheckpointInterval,
		Logger:           s.log,
	}))
	if err != nil {
		s.jlog.close()
		return nil, false, err
	}
	var marked, old bool
	db.View(func(tx *manifest.Tx) error {
		marked, old = tx.Journaled(), tx.Schema() < manifest.SchemaVersion
		return nil
	})
	switch {
	case marked && created:
		// Opening it would lose every record after the last checkpoint;
		// the directory just made goes, so that every later open fails too.
		db.Close()
		s.jlog.close()
		os.RemoveAll(jdir)
		return nil, false, fmt.Errorf("the store's journal %s is missing (the index was written through it; the records since its last checkpoint are lost)", jdir)
	case !marked || old:
		// (old: marked by a kvfs that did not raise the schema version.)
		// Marked in bbolt itself (the checkpoint), not only in the journal:
		// the mark is what tells a later open that the journal is needed.
		err := db.Update(func(tx *manifest.Tx) error { return tx.SetJournaled() })
		if err == nil {
			err = db.Checkpoint()
		}
		if err != nil {
			db.Close()
			s.jlog.close()
			return nil, false, fmt.Errorf("mark the index journaled: %w", err)
		}
	}
	return db, created, nil
}

// journalSegmentFor is the segment size of a new journal in dir: 1/64 of
// the filesystem, between 256 KiB and 64 MiB. The journal keeps at least
// two segments (one in use, one made ahead), written whole: on a small
// filesystem (a test's, a small partition) 64 MiB ones would not fit.
func journalSegmentFor(dir string) int64 {
	const lo, hi = 256 << 10, 64 << 20
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return hi
	}
	return min(max(int64(st.Blocks)*int64(st.Bsize)/64, lo), hi) &^ 4095
}

// JournalBytes is the disk space that the journal of a new store in dir
// preallocates: two segments (one in use, one made ahead) of
// journalSegmentFor's size.
func JournalBytes(dir string) int64 { return 2 * journalSegmentFor(dir) }

// journalMaxPayload is the largest record the store's journal takes: a
// commit's record holds its manifest and chunk records (about 100 bytes a
// chunk), so the bound sets the largest file one commit can hold (about
// 40 GiB in 64 KiB chunks with 64 MiB segments).
func journalMaxPayload(segment int64) int {
	return int(segment - segment/16)
}

// Sync makes every change committed so far durable: a directory's fsync.
// Without the journal every commit is durable already.
func (s *Store) Sync() error { return s.SyncTo(s.Changes()) }

// Changes is a mark of the changes committed so far, for SyncTo.
func (s *Store) Changes() uint64 { return s.db.LastSeq() }

// SyncTo makes the changes up to mark (Changes) durable: a file's fsync
// takes the mark before its commit, so that the changes of the file's
// attributes made before it are durable too when it has nothing to
// commit, and costs nothing more when it commits (the commit's sync
// covers them).
func (s *Store) SyncTo(mark uint64) error {
	if err := s.db.Sync(mark); err != nil {
		return fmt.Errorf("sync store %s: %w", s.dir, err)
	}
	return nil
}

// syncReleases makes the releases committed so far durable, before
// their chunks are punched (punch): in journal mode a commit returns
// before its record is durable, and a crash that lost the record would
// bring back manifests listing the punched chunks. It reports whether the
// punch may go ahead. A commit of a file syncs anyway; the extra sync is
// paid by removals and renames that release chunks (an empty file's
// removal releases none), and shared with concurrent commits.
func (s *Store) syncReleases() bool {
	if err := s.db.Sync(s.db.LastSeq()); err != nil {
		s.log.Warn("punch released chunks: not punched, their release is not durable", "err", err)
		return false
	}
	return true
}

// reconcile punches the dead ranges of packs that are partly live: every
// committed byte of such a pack that no chunk record covers. A crash
// drops the queue of punches waiting for a checkpoint (and, before the
// journal, a crash between a release and its punch left the same); the
// index still says which bytes are live. Punching a range twice is
// harmless. It runs in recover, after uncommitted tails are cut and dead
// packs removed.
func (s *Store) reconcile() error {
	var states map[uint32]manifest.Pack
	live := map[uint32][]blockstore.Loc{}
	err := s.db.View(func(tx *manifest.Tx) error {
		var err error
		if states, err = tx.Packs(); err != nil {
			return err
		}
		return tx.ForEachChunk(func(_ blockstore.ID, c manifest.Chunk) error {
			if p := states[c.Loc.Pack]; p.Dead > 0 {
				live[c.Loc.Pack] = append(live[c.Loc.Pack], c.Loc)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("reconcile dead ranges: %w", err)
	}
	for pack, p := range states {
		if p.Dead == 0 || isDead(p) {
			continue
		}
		locs := live[pack]
		slices.SortFunc(locs, func(a, b blockstore.Loc) int { return int(a.Off - b.Off) })
		var holes []blockstore.Loc
		var pos int64
		for _, l := range locs {
			if l.Off > pos {
				holes = append(holes, blockstore.Loc{Pack: pack, Off: pos, Len: l.Off - pos})
			}
			pos = max(pos, l.Off+l.Len)
		}
		if p.Committed > pos {
			holes = append(holes, blockstore.Loc{Pack: pack, Off: pos, Len: p.Committed - pos})
		}
		if len(holes) == 0 {
			continue
		}
		err := s.packs.Punch(pack, holes)
		if errors.Is(err, syscall.ENOSPC) && s.reserve.release("punch", err) {
			err = s.packs.Punch(pack, holes)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("reconcile: punch dead ranges", "err", err)
		}
	}
	return nil
}
