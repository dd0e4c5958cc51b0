package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// DefaultChunkSize is the chunk size C of a new store: with a head dimension
// of 128 in bf16, 256 tokens of one head.
const DefaultChunkSize = 64 << 10

// Options configure an open store.
type Options struct {
	// Logger receives recovery notes, files stored as plain and
	// corruption reports. Nil discards.
	Logger *slog.Logger
	// Verify checks every chunk read against its sha256.
	Verify bool
	// BlobGrace is how long a blob that no format-5 manifest lists
	// outlives its last name; 0 means DefaultBlobGrace.
	BlobGrace time.Duration
	// PackBytes is the size at which ingests move to a new pack; 0 means
	// blockstore.DefaultPackBytes.
	PackBytes int64
	// AdoptMinBytes is the smallest spool that a commit may take as a pack
	// as it is (CommitOptions.Adopt); 0 means DefaultAdoptMinBytes.
	AdoptMinBytes int64
	// FixedChunks cuts files of no parsed format every C bytes from
	// offset 0, as stores did before they cut such files by their content
	// (cdc.go): for the tests of that grid, which files stored then keep,
	// and for comparisons.
	FixedChunks bool
	// LockTimeout bounds the wait for another process's lock on the
	// store; 0 means one second.
	LockTimeout time.Duration
	// Reserve is the disk space, in bytes, that the store keeps for
	// removals on a full disk (see reserve.go); 0 means 1/64 of the
	// filesystem, at least 64 KiB and at most 64 MiB.
	Reserve int64
	// MaxOpenPacks bounds the read descriptors kept open for packs (an
	// LRU of idle ones; those in use are never closed); 0 means
	// blockstore.DefaultMaxOpen.
	MaxOpenPacks int
	// MaxSnapshotTokens and MaxSnapshotBlockRefs bound the token list and
	// the block references the store indexes for one snapshot; larger
	// snapshots are stored as plain files (caps.go). 0 means
	// DefaultMaxSnapshotTokens and DefaultMaxSnapshotBlockRefs.
	MaxSnapshotTokens    int
	MaxSnapshotBlockRefs int
	// MaxSnapshotSlots bounds the tensors of a snapshot the store
	// indexes (caps.go); 0 means DefaultMaxSnapshotSlots.
	MaxSnapshotSlots int
	// AnyOwner opens a store that this process's user does not own, or
	// one below a directory another user may change (see trust.go): for
	// tests, and for an administrator who has checked the store's files.
	// kvfs's commands never set it.
	AnyOwner bool
	// NoJournal runs the index without the journal (journal.go): each
	// transaction is a synced bbolt transaction, as before the journal.
	// For comparison benchmarks; a store that has used the journal
	// cannot be opened this way.
	NoJournal bool
	// JournalSegmentSize is the size of the journal's segment files; 0
	// means 1/64 of the filesystem, between 256 KiB and 64 MiB. It
	// bounds the largest commit (journalMaxPayload).
	JournalSegmentSize int64
	// CheckpointEntries and CheckpointInterval set when the index writes
	// the journal's records to bbolt in the background
	// (manifest.JournalOptions MaxEntries and Interval); 0 means the
	// defaults (64 Ki entries, 30 s). Tests make checkpoints frequent.
	CheckpointEntries  int
	CheckpointInterval time.Duration
	// OnJournalSync, if set, is told how long each of the journal's
	// group commits took (journal.Options.OnSync): the daemon exports it
	// as a latency histogram.
	OnJournalSync func(time.Duration)
}

// Store is an open store. Its methods are safe for concurrent use.
type Store struct {
	dir       string
	db        *manifest.DB
	packs     *blockstore.Dir // appends, punches, pack files
	punchq    punchQueue      // released ranges being punched (punchq.go)
	matches   matchCounts     // prefix lookups by outcome (match.go)
	compactMu sync.Mutex      // one Compact at a time; Check waits for it (compact.go)
	chunks    chunkReader     // reads (packs, behind the narrow interface)
	chunkSize int64
	fixed     bool // Options.FixedChunks
	log       *slog.Logger
	verify    bool
	packBytes int64
	blobGrace time.Duration
	// seen keeps blobs that clients saw exist (seen.go).
	seen    sightings
	reserve *reserve
	// owner owns the root and what is created without a calling user
	// (owner.go).
	owner Owner
	caps  snapshotCaps

	// compactions counts what compaction did since Open (compactstats.go).
	compactions compactCounter

	// beforeCommit, if set (by tests), runs between chunking and commit.
	beforeCommit func()

	closeOnce sync.Once
	closed    atomic.Bool

	// jlog is the journal in journal mode (nil without it).
	jlog *lazyLog
	// inline tracks chunk bytes committed through the journal (inline.go).
	inline inlineState
	// opened: Open finished (recover ran); only then may Close mark the
	// store closed cleanly.
	opened bool

	// pins orders taking a pin on an inode (open, hold) against
	// transactions that may release an inode's chunks (remove, rename
	// over, commit of a new version, last close of an orphan). A pin is
	// taken under the read lock, inside a read transaction; a releasing
	// transaction runs whole under the write lock. So a release either
	// sees the pin (and keeps the inode as an orphan) or has committed
	// before the pinning transaction began (and the open finds no inode):
	// a reader never holds extents whose chunks were released and punched.
	pins sync.RWMutex

	mu sync.Mutex // guards open, appending and held
	// open counts the open handles of each inode: an inode with handles
	// keeps its chunks when its last name goes (it becomes an orphan).
	open map[uint64]int
	// appending holds the packs open for appending, shared by ingests
	// (packslot.go).
	appending appendPacks
	// held marks the packs that have an appender, in use or not, and
	// those being adopted.
	held map[uint32]bool
	// adoptMin is Options.AdoptMinBytes.
	adoptMin int64
	// opening is held while a pack is opened for appending (packslot.go).
	opening sync.Mutex
	// retain is the capacity and retention state (settings.go,
	// recency.go, evict.go).
	retain retainState
	// appendPacks is how many packs stay open for appending
	// (maxAppendPacks; tests lower it to make ingests share a pack).
	appendPacks int
}

// The chunk sizes a store may have: below 4 KiB the index outgrows the
// data it saves; above 64 MiB a one-byte change rewrites too much.
const (
	MinChunkSize = 4 << 10
	MaxChunkSize = 64 << 20
)

// Init creates a store in dir (which may exist but must not hold a store)
// with chunk size chunkSize, owned by this process's user (see owner.go).
func Init(dir string, chunkSize int64) error { return InitAs(dir, chunkSize, ProcessOwner()) }

// InitAs is Init with the store's owner o. When o is not this process's
// owner (root initialising a store for a user), the store's files are
// given to o, so that o can open and mount it.
func InitAs(dir string, chunkSize int64, o Owner) error {
	if chunkSize < MinChunkSize || chunkSize > MaxChunkSize {
		return fmt.Errorf("init %s: chunk size %d outside [4 KiB, 64 MiB]", dir, chunkSize)
	}
	real, err := TrustedDir(dir)
	if err != nil {
		return fmt.Errorf("init %s: %w", dir, err)
	}
	if err := mkdirTrusted(real); err != nil {
		return fmt.Errorf("init %s: %w", dir, err)
	}
	dir = real
	dbPath := filepath.Join(dir, "kvfs.db")
	if _, err := os.Stat(dbPath); err == nil {
		return fmt.Errorf("init %s: %w", dir, fs.ErrExist)
	}
	for _, sub := range []string{"packs", "spool"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return fmt.Errorf("init %s: %w", dir, err)
		}
	}
	db, err := manifest.Open(dbPath, true, manifest.Params{ChunkSize: chunkSize}, time.Second)
	if err != nil {
		return fmt.Errorf("init %s: %w", dir, err)
	}
	err = db.Update(func(tx *manifest.Tx) error { return recordOwner(tx, o) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("init %s: %w", dir, err)
	}
	newReserve(dir, 0, slog.New(slog.DiscardHandler)).fill()
	if o != ProcessOwner() {
		if err := chownTree(dir, o); err != nil {
			return fmt.Errorf("init %s: give the store to %d:%d: %w", dir, o.UID, o.GID, err)
		}
	}
	return nil
}

// Open opens the store in dir and recovers from any crash: pack bytes past
// their committed length are cut, orphans left by a crash are released and
// the spool is emptied.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.AnyOwner {
		real, err := TrustedDir(dir)
		if err != nil {
			return nil, fmt.Errorf("open store %s: %w", dir, err)
		}
		dir = real
	}
	if opts.PackBytes <= 0 {
		opts.PackBytes = blockstore.DefaultPackBytes
	}
	if opts.BlobGrace <= 0 {
		opts.BlobGrace = DefaultBlobGrace
	}
	if opts.AdoptMinBytes <= 0 {
		opts.AdoptMinBytes = DefaultAdoptMinBytes
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	if opts.MaxSnapshotTokens <= 0 {
		opts.MaxSnapshotTokens = DefaultMaxSnapshotTokens
	}
	if opts.MaxSnapshotBlockRefs <= 0 {
		opts.MaxSnapshotBlockRefs = DefaultMaxSnapshotBlockRefs
	}
	rsv := newReserve(dir, opts.Reserve, opts.Logger)
	s := &Store{dir: dir, log: opts.Logger, verify: opts.Verify,
		packBytes: opts.PackBytes, blobGrace: opts.BlobGrace, reserve: rsv, caps: snapshotCaps{tokens: opts.MaxSnapshotTokens, blockRefs: opts.MaxSnapshotBlockRefs}, open: map[uint64]int{}, held: map[uint32]bool{},
		appending: appendPacks{byPack: map[uint32]*sharedPack{}}, adoptMin: opts.AdoptMinBytes, appendPacks: maxAppendPacks}
	s.seeAll(time.Now())
	db, _, err := s.openIndex(opts)
	if errors.Is(err, syscall.ENOSPC) && rsv.release("open index", err) {
		db, _, err = s.openIndex(opts)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open store %s: no store here (run kvfs init): %w", dir, err)
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s.db = db
	packs, err := blockstore.OpenWith(filepath.Join(dir, "packs"), blockstore.Options{MaxOpen: opts.MaxOpenPacks})
	if err != nil {
		db.Close()
		if s.jlog != nil {
			s.jlog.close()
		}
		return nil, err
	}
	s.packs, s.chunks = packs, packs
	s.fixed = opts.FixedChunks
	s.caps.slots = opts.MaxSnapshotSlots
	db.View(func(tx *manifest.Tx) error {
		s.chunkSize = tx.Params().ChunkSize
		return nil
	})
	if err := s.loadOwner(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s.retain.kick = make(chan struct{}, 1)
	if err := s.loadSettings(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s.loadAge()
	if err := s.recover(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: recover: %w", dir, err)
	}
	if err := s.indexPrefixes(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: prefix index: %w", dir, err)
	}
	s.reserve.fill()
	if s.jlog != nil {
		if j, err := s.jlog.get(); err == nil {
			if err := j.Ready(); err != nil {
				s.log.Warn("journal: the next segment could not be made ahead; it is made when needed", "err", err)
			}
		}
	}
	s.opened = true
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// ChunkSize is the store's chunk size C.
func (s *Store) ChunkSize() int64 { return s.chunkSize }

// Closed reports whether Close was called.
func (s *Store) Closed() bool { return s.closed.Load() }

// Close closes the store. Open files must be closed first. Closing twice
// is allowed.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.close() })
	return err
}

func (s *Store) close() error {
	if s.opened {
		if err := s.flushUses(); err != nil {
			s.log.Warn("uses not written at close", "err", err)
		}
	}
	s.closed.Store(true)
	s.WaitReclaim()
	s.closeAppendPacks()
	// The index checkpoints as it closes; here first, so that a full
	// disk may give up the reserve for it (checkpoint).
	var err error
	if s.db.Journaled() {
		err = s.checkpoint()
	}
	// The rest happens before the index lets go of the store's lock:
	// another process that opens the store must find it as this one left
	// it (a marker created after it opened would tell it, or the process
	// after it, that its own close was clean).
	cerr := s.db.CloseWith(func(cerr error) error {
		if err == nil {
			err = cerr
		}
		if cerr := s.packs.Close(); err == nil {
			err = cerr
		}
		if s.jlog != nil {
			if cerr := s.jlog.close(); err == nil {
				err = cerr
			}
			if err == nil && s.opened {
				if f, cerr := os.Create(closedMarker(s.dir)); cerr == nil {
					f.Close()
				}
			}
		}
		return err
	})
	if err == nil {
		err = cerr
	}
	return err
}

func (s *Store) recover() error {
	onDisk, err := s.packs.Packs()
	if err != nil {
		return err
	}
	var states map[uint32]manifest.Pack
	var orphans []uint64
	if err := s.db.View(func(tx *manifest.Tx) error {
		states, err = tx.Packs()
		if err != nil {
			return err
		}
		orphans, err = tx.Orphans()
		return err
	}); err != nil {
		return err
	}
	s.untaintCommitted(states)
	var dead []uint32
	tails := map[uint32]int64{} // packs longer than committed: their lengths
	for pack, size := range onDisk {
		st, ok := states[pack]
		if !ok {
			// Its record went and the daemon stopped before the file
			// did (dropDeadPacks): nothing refers to it.
			s.log.Info("recover: removing a pack that the index dropped", "pack", s.packs.Path(pack))
			if err := s.packs.Remove(pack); err != nil {
				return err
			}
			continue
		}
		if isDead(st) {
			dead = append(dead, pack)
		}
		committed := st.Committed
		if size > committed {
			tails[pack] = committed
		}
	}
	if len(tails) > 0 || len(dead) > 0 {
		// Bytes past a pack's committed length are an ingest's that did
		// not commit, and go; unless the index holds a chunk there: then
		// the length is what is wrong (a damaged index), and cutting
		// would destroy committed bytes. Such a pack is left as it is,
		// takes no new ingest, and waits for kvfs fsck --repair. So is a
		// pack whose record says it is all dead while a chunk lies in it.
		scan := maps.Clone(tails)
		for _, pack := range dead {
			scan[pack] = 0
		}
		ends, err := s.chunkEnds(scan)
		if err != nil {
			return err
		}
		dead = slices.DeleteFunc(dead, func(pack uint32) bool {
			if ends[pack] == 0 {
				return false
			}
			s.log.Error("recover: a pack recorded as all dead holds a chunk; not removing it (run kvfs fsck)",
				"pack", s.packs.Path(pack), "chunk_end", ends[pack])
			s.taintPack(pack, math.MaxUint64, math.MaxInt64)
			delete(tails, pack)
			return true
		})
		for pack, committed := range tails {
			if ends[pack] > committed {
				s.log.Error("recover: a chunk lies past the pack's committed length; not cutting it (run kvfs fsck)",
					"pack", s.packs.Path(pack), "committed", committed, "chunk_end", ends[pack])
				s.taintPack(pack, math.MaxUint64, math.MaxInt64)
				continue
			}
			s.log.Info("recover: cutting uncommitted pack tail", "pack", s.packs.Path(pack), "size", onDisk[pack], "committed", committed)
			if err := s.packs.Truncate(pack, committed); err != nil {
				return err
			}
		}
	}
	// Packs whose last chunk was released just before a crash, or by a
	// version that did not remove dead packs.
	s.dropDeadPacks(dead)
	if s.db.Journaled() {
		// Without the marker of a clean close, punches may have been
		// lost with the queue (journal.go). The marker goes for good
		// before anything new is queued.
		m := closedMarker(s.dir)
		if err := os.Remove(m); errors.Is(err, fs.ErrNotExist) {
			if err := s.reconcile(); err != nil {
				return err
			}
		} else if err != nil {
			return err
		} else if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	// The spool goes before the orphans: it frees space that their
	// release may need on a full disk.
	spool := filepath.Join(s.dir, "spool")
	entries, err := os.ReadDir(spool)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(spool, e.Name())); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return err
	}
	for _, ino := range orphans {
		s.log.Info("recover: releasing orphaned inode", "ino", ino)
		if err := s.releaseOrphan(ino); err != nil {
			return err
		}
	}
	return nil
}

// chunkEnds returns, for each of packs, the end of its last chunk in the
// index (a scan of every chunk record: recovery calls it only when a pack
// is longer than its committed length).
func (s *Store) chunkEnds(packs map[uint32]int64) (map[uint32]int64, error) {
	ends := map[uint32]int64{}
	err := s.db.View(func(tx *manifest.Tx) error {
		return tx.ForEachChunk(func(_ blockstore.ID, c manifest.Chunk) error {
			if _, ok := packs[c.Loc.Pack]; ok {
				ends[c.Loc.Pack] = max(ends[c.Loc.Pack], c.Loc.End())
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("recover: read chunk records: %w", err)
	}
	return ends, nil
}

// checkpoint writes the index's journal records to bbolt now. On a full
// disk (bbolt grows) it gives up the reserve, as a removal does: the
// records a full disk leaves to checkpoint are mostly removals, which
// need the room bbolt cannot find.
func (s *Store) checkpoint() error {
	err := s.db.Checkpoint()
	if errors.Is(err, syscall.ENOSPC) && s.reserve.release("checkpoint", err) {
		err = s.db.Checkpoint()
	}
	return err
}

// updateReleasing runs fn in a write transaction that may release
// inodes, ordered against pins (see Store.pins).
func (s *Store) updateReleasing(fn func(tx *manifest.Tx) error) error {
	seq, err := s.updateReleasingSeq(fn)
	if err != nil {
		return err
	}
	return s.written(seq)
}

// written waits until the journal record seq is in its file (after the
// pin lock: it may wait for a sync in progress), so that a change that
// returns survives a crash of the daemon; manifest.DB.Update does the
// same for the transactions that do not go through UpdateSeq.
func (s *Store) written(seq uint64) error {
	if s.jlog == nil || seq == 0 {
		return nil
	}
	if err := s.jlog.Write(seq); err != nil {
		return fmt.Errorf("journal write: %w", err)
	}
	return nil
}

// updateReleasingSeq is updateReleasing, returning the journal sequence
// number that makes the transaction durable (manifest.DB.UpdateSeq).
func (s *Store) updateReleasingSeq(fn func(tx *manifest.Tx) error) (uint64, error) {
	s.pins.Lock()
	defer s.pins.Unlock()
	return s.db.UpdateSeq(fn)
}

// viewPinning runs fn, which takes pins, in a read transaction ordered
// against releases (see Store.pins).
func (s *Store) viewPinning(fn func(tx *manifest.Tx) error) error {
	s.pins.RLock()
	defer s.pins.RUnlock()
	return s.db.View(fn)
}

// releaseOrphan drops an orphaned inode and releases its chunks.
func (s *Store) releaseOrphan(ino uint64) error {
	var freed []blockstore.Loc
	err := s.freeing("release orphan", func(tx *manifest.Tx) error {
		freed = nil
		s.mu.Lock()
		open := s.open[ino] > 0
		s.mu.Unlock()
		if open {
			return nil // reopened meanwhile; its last close releases it
		}
		n, err := tx.Inode(ino)
		if errors.Is(err, manifest.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		freed, err = s.releaseInode(tx, n)
		return err
	})
	if err != nil {
		return fmt.Errorf("release orphan %d: %w", ino, err)
	}
	s.punch(freed)
	return nil
}

// releaseInode deletes an inode and releases its manifest's chunks, its
// blob pins, and (through retire) a blob content it was the last name of,
// in tx.
func (s *Store) releaseInode(tx *manifest.Tx, n *manifest.Inode) ([]blockstore.Loc, error) {
	return s.releaseInodeExcept(tx, n, nil)
}

// releaseInodeExcept is releaseInode, leaving the counts of the chunks in
// keep as they are (their references move to a new version).
func (s *Store) releaseInodeExcept(tx *manifest.Tx, n *manifest.Inode, keep map[blockstore.ID]bool) ([]blockstore.Loc, error) {
	var freed []blockstore.Loc
	if !n.IsDir() {
		m, err := tx.Manifest(n.Ino)
		if err != nil && !errors.Is(err, manifest.ErrNotFound) {
			return nil, err
		}
		ids := m.Chunks()
		if keep != nil {
			ids = slices.DeleteFunc(ids, func(id blockstore.ID) bool { return keep[id] })
		}
		if freed, err = tx.Release(ids); err != nil {
			return nil, err
		}
		f, err := s.unpinBlobs(tx, n.Ino)
		if err != nil {
			return nil, err
		}
		freed = append(freed, f...)
	}
	if err := tx.DeleteInode(n); err != nil {
		return nil, err
	}
	if n.Blob != "" {
		f, err := s.retire(tx, n.Blob, time.Now())
		if err != nil {
			return nil, err
		}
		freed = append(freed, f...)
	}
	return freed, nil
}

// punch frees the space of released chunks: a pack left with nothing live
// is removed whole (dropDeadPacks), the others have the chunks punched out.
// It runs after their release has committed; a failure only leaves dead
// bytes, which are logged. (A punch can need a block to split an extent:
// on a full disk, the reserve is given up for it.) Then, with room made,
// the reserve is made again if it was given up.
func (s *Store) punch(freed []blockstore.Loc) {
	if len(freed) == 0 || !s.syncReleases() {
		return
	}
	byPack := map[uint32][]blockstore.Loc{}
	var packs []uint32
	for _, l := range freed {
		if _, ok := byPack[l.Pack]; !ok {
			packs = append(packs, l.Pack)
		}
		byPack[l.Pack] = append(byPack[l.Pack], l)
	}
	gone := s.dropDeadPacks(packs)
	for pack := range gone {
		delete(byPack, pack)
	}
	if s.roomy() {
		s.queuePunch(byPack) // punchq.go: off the caller's path
	} else {
		for pack, locs := range byPack {
			s.punchPack(pack, locs)
		}
	}
	s.reserve.fill()
}

// ctxErr reports a cancelled context.
func ctxErr(ctx context.Context) error { return ctx.Err() }
