package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/kvfs/kvfs/internal/bufpool"
	"github.com/kvfs/kvfs/manifest"
)

// Small commits' new bytes travel in the journal. A commit's new chunks
// used to cost a flush of their pack before the commit's record: an fsync
// of the shared pack they were appended to (packslot.go), or, for a spool
// adopted as a pack of its own (adopt.go), an fsync of the new pack file
// and one of packs/ (its new name). When a commit's new bytes are few
// (inlineMax), the commit instead appends a data record to the journal
// before its index record: the pack number, the pack's size as far as
// this commit is concerned and each new range with its bytes. The
// commit's journal sync then makes the bytes durable with the index
// change, one flush in all, and concurrent commits share it. The pack
// file and its name are made durable by the next checkpoint, before its
// bbolt transaction (syncInline, the index's BeforeCheckpoint): once a
// checkpoint covers a data record, the journal may drop it. Large commits
// keep the fsync of their pack: large files are not written twice.
//
// Recovery. Open replays the data records after the last checkpoint, in
// order with the index's (manifest.JournalOptions.ReplayData): each
// writes its ranges at the same place in the same pack file, creating the
// file if its name was lost, and extends it to the pack's size. Writing
// bytes that are already there is harmless, so replay is idempotent. A
// data record whose index record was lost (the crash came between them,
// or the commit failed) leaves bytes the index does not know: a pack file
// without a record is removed by recover, bytes past a pack's committed
// length are cut, and ranges released since are punched again by
// reconcile (an open after a crash does not follow a clean close).
//
// Reuse of pack offsets. Replay writes a data record's bytes wherever the
// record says, whether or not its commit happened. Bytes at or below a
// pack's committed length are never handed out again (packs are append
// only), so a stale record can only write there what is dead. But the
// bytes past the committed length are handed out again whenever a pack is
// cut back (an ingest failed, or recover cut an uncommitted tail): had a
// record of the failed ingest stayed in the journal, the next replay
// would write its bytes over those of the ingest that reused the offsets.
// So a pack that a data record wrote past the committed length is tainted
// until a checkpoint covers the record (the next open does not replay
// it): it takes no new ingest, and takePack does not open it again.
// Tainted are the packs of an ingest that journaled its bytes and then
// failed (finish), and, at open, those a replayed record wrote past their
// committed length.

// inlineMax bounds the live bytes of a commit that go into the journal.
const inlineMax = 1 << 20

// inlineCheckpoint is how many inlined bytes start a checkpoint: the
// journal cannot drop data records until one runs, and its segments
// should be recycled, not added.
const inlineCheckpoint = 32 << 20

// inlineState tracks what the data records wrote since the last
// checkpoint.
type inlineState struct {
	max   int64 // largest inlined commit, by the journal's record bound
	mu    sync.Mutex
	dirty map[uint32]bool // packs written through data records, unsynced
	names bool            // a pack got its name (a rename) since
	bytes atomic.Int64    // inlined since the last checkpoint
	// checkpointAt is how many inlined bytes start a checkpoint
	// (inlineCheckpoint, or less with small journal segments).
	checkpointAt int64
	ckpt         atomic.Bool // a checkpoint it asked for is running
	// tainted are the packs a data record may have written past their
	// committed length, until a checkpoint covers the record (see
	// "Reuse of pack offsets"). Guarded by mu.
	tainted map[uint32]taint
	// bufs keeps the buffers of data records for the next ones: the
	// journal copies a record as it is appended, and a buffer made per
	// commit cost its fresh pages' faults (bufpool).
	bufs *bufpool.Pool
}

// Data records are encoded into buffers of inlineBufMin to inlineBufMax
// bytes (one inlined commit, ranges included), inlineBufKeep of them kept.
const (
	inlineBufMin  = 64 << 10
	inlineBufMax  = 2 * inlineMax
	inlineBufKeep = 8 << 20
)

// taint is a pack's latest data record (seq) and the end of its ranges.
type taint struct {
	seq uint64
	end int64
}

// inlines reports whether a commit with n live new bytes goes into the
// journal.
func (s *Store) inlines(n int64) bool {
	return s.db.Journaled() && n <= s.inline.max
}

// encodeData is a data record: RecordData, pack:u32, size:u64, then per
// range off:uvarint len:uvarint bytes. Its buffer comes from s.inline.bufs,
// and goes back there with appendData.
func (s *Store) encodeData(pack uint32, size int64, ranges [][2]int64, read func(off, n int64, b []byte) error) ([]byte, error) {
	total := 13
	for _, r := range ranges {
		total += 2*binary.MaxVarintLen64 + int(r[1])
	}
	b := s.inline.bufs.Scratch(total)[:0]
	b = append(b, manifest.RecordData)
	b = binary.BigEndian.AppendUint32(b, pack)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	for _, r := range ranges {
		b = binary.AppendUvarint(b, uint64(r[0]))
		b = binary.AppendUvarint(b, uint64(r[1]))
		at := len(b)
		b = b[:at+int(r[1])] // within the capacity reserved above
		if err := read(r[0], r[1], b[at:]); err != nil {
			s.inline.bufs.Put(b)
			return nil, err
		}
	}
	return b, nil
}

// appendData appends a data record for pack (which now has its name in
// packs/) ahead of the commit's index record, marks the pack for the next
// checkpoint's sync, and returns the record's sequence number. The record
// (from encodeData) is the journal's copy once appended: its buffer goes
// back to the pool.
func (s *Store) appendData(pack uint32, rec []byte) (uint64, error) {
	defer s.inline.bufs.Put(rec)
	s.inline.mu.Lock()
	s.inline.dirty[pack] = true
	s.inline.names = true
	s.inline.mu.Unlock()
	// Deferred: the commit's index record, appended next, writes it with
	// itself, one write for both (a record without its commit is of no
	// use; if the commit fails it is written with a later record).
	seq, err := s.jlog.AppendDeferred(rec)
	if err != nil {
		return 0, fmt.Errorf("journal the bytes of pack %d: %w", pack, err)
	}
	if s.inline.bytes.Add(int64(len(rec))) > s.inline.checkpointAt && s.inline.ckpt.CompareAndSwap(false, true) {
		go func() {
			defer s.inline.ckpt.Store(false)
			if err := s.checkpoint(); err != nil {
				s.log.Error("checkpoint for inlined bytes", "err", err)
			}
		}()
	}
	return seq, nil
}

// taintPack notes that the data record seq wrote pack up to end, maybe
// past its committed length.
func (s *Store) taintPack(pack uint32, seq uint64, end int64) {
	s.inline.mu.Lock()
	defer s.inline.mu.Unlock()
	if s.inline.tainted == nil {
		s.inline.tainted = map[uint32]taint{}
	}
	t := s.inline.tainted[pack]
	s.inline.tainted[pack] = taint{seq: max(t.seq, seq), end: max(t.end, end)}
}

// untaintCommitted drops, once the index is open, the taints of packs
// whose replayed records all wrote below the committed length.
func (s *Store) untaintCommitted(states map[uint32]manifest.Pack) {
	s.inline.mu.Lock()
	defer s.inline.mu.Unlock()
	for pack, t := range s.inline.tainted {
		if st, ok := states[pack]; ok && t.end <= st.Committed {
			delete(s.inline.tainted, pack)
		}
	}
}

// tainted reports whether pack may not be appended to (see "Reuse of
// pack offsets"); a taint that a checkpoint has covered goes.
func (s *Store) tainted(pack uint32) bool {
	s.inline.mu.Lock()
	defer s.inline.mu.Unlock()
	t, ok := s.inline.tainted[pack]
	if ok && t.seq <= s.db.Checkpointed() {
		delete(s.inline.tainted, pack)
		return false
	}
	return ok
}

// packPath is pack's file, as blockstore names it; replay runs before the
// pack directory is opened.
func (s *Store) packPath(pack uint32) string {
	return filepath.Join(s.dir, "packs", fmt.Sprintf("%06d.pack", pack))
}

// replayData is the index's ReplayData: it writes a data record's bytes
// back in place.
func (s *Store) replayData(seq uint64, p []byte) error {
	if len(p) < 13 {
		return fmt.Errorf("data record of %d bytes", len(p))
	}
	pack := binary.BigEndian.Uint32(p[1:])
	size := int64(binary.BigEndian.Uint64(p[5:]))
	path := s.packPath(pack)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("replay bytes of %s: %w", path, err)
	}
	defer f.Close()
	end := int64(0)
	for rest := p[13:]; len(rest) > 0; {
		off, k := binary.Uvarint(rest)
		if k <= 0 {
			return fmt.Errorf("replay bytes of %s: bad range offset", path)
		}
		rest = rest[k:]
		n, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < n {
			return fmt.Errorf("replay bytes of %s: bad range length", path)
		}
		rest = rest[k:]
		if _, err := f.WriteAt(rest[:n], int64(off)); err != nil {
			return fmt.Errorf("replay bytes of %s: %w", path, err)
		}
		rest = rest[n:]
		end = max(end, int64(off+n))
	}
	s.taintPack(pack, seq, max(end, size))
	if fi, err := f.Stat(); err != nil {
		return fmt.Errorf("replay bytes of %s: %w", path, err)
	} else if fi.Size() < size {
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("replay bytes of %s: %w", path, err)
		}
	}
	s.inline.mu.Lock()
	s.inline.dirty[pack] = true
	s.inline.names = true
	s.inline.mu.Unlock()
	return nil
}

// syncInline is the index's BeforeCheckpoint: the packs that data
// records wrote, and their names, become durable before bbolt takes the
// records' index changes and the journal drops the records. A pack
// marked after the snapshot is synced by the next checkpoint; one marked
// before is synced here, and its record precedes the checkpoint's.
func (s *Store) syncInline(uint64) error {
	s.inline.mu.Lock()
	dirty, names := s.inline.dirty, s.inline.names
	s.inline.dirty, s.inline.names = map[uint32]bool{}, false
	s.inline.mu.Unlock()
	s.inline.bytes.Store(0)
	var errs []error
	for pack := range dirty {
		if err := syncFile(s.packPath(pack)); err != nil {
			errs = append(errs, err)
		}
	}
	if names {
		if err := syncDir(filepath.Join(s.dir, "packs")); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.inline.mu.Lock()
		for pack := range dirty {
			s.inline.dirty[pack] = true
		}
		s.inline.names = s.inline.names || names
		s.inline.mu.Unlock()
		return fmt.Errorf("sync packs written through the journal: %w", err)
	}
	return nil
}

// syncFile fdatasyncs a pack file; one removed meanwhile (dead) needs
// nothing.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
