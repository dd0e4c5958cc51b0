package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Compaction rewrites packs that are mostly dead. Releases punch their
// chunks out of packs (punchq.go), but where the filesystem cannot punch
// (macOS APFS, some network filesystems) dead bytes stay on disk for as
// long as one chunk of the pack lives, and where it can, a pack ends up a
// confetti of holes and live ranges. Compact copies the live chunks of
// each pack whose dead fraction reaches a threshold into a new pack,
// switches their chunk records to the new places in one index
// transaction (refcounts unchanged), and then removes the old packs, now
// all dead, as dropDeadPacks removes any dead pack.
//
// Which packs. A pack held by an appender or being adopted (Store.held)
// may still receive chunks, and one tainted by a data record not yet
// covered by a checkpoint (inline.go, "Reuse of pack offsets") may be
// written again by a replay: both are skipped. Compact takes the packs it
// rewrites as held itself (under s.mu, as takePack does), so that no
// ingest opens them for appending and no dead-pack removal races it.
// Finding a pack's live chunks is a scan of the chunk records, made only
// when some pack qualifies (the pack records are read first).
//
// Readers. A File resolves its chunks' places when it is opened, and
// keeps them. A reader that resolved a chunk in an old pack before the
// switch still reads the right bytes: an old pack's live ranges are never
// punched (its chunks are moved, not released), and a descriptor held
// while the file is removed keeps reading it. Once the file is gone,
// opening it fails with ErrNotExist, and the reader looks the chunk up
// again (File.relocate): the file pins its inode, so its chunks are still
// in the index, at their new places. Pack numbers are never reused, so a
// stale place can never name another pack's bytes.
//
// Crash safety. The order is:
//
//  1. the new pack's record is allocated (committed length 0, held);
//  2. the live chunks are copied into its file, each verified against its
//     sha256 as it is read (a chunk released and punched meanwhile reads
//     as zeros; it is skipped if its record has gone or moved);
//  3. the new pack is fsynced, and packs/ for its name;
//  4. one transaction points each moved chunk (still at its old place)
//     at its copy, counts the old ranges dead and records the new pack's
//     committed length (its bytes of chunks released meanwhile dead); it
//     is made durable (journal sync);
//  5. the old packs, all dead now, go: their records, synced, then their
//     files (dropDeadPacks).
//
// A crash before 4 is durable leaves the chunks where they were, intact
// (nothing in an old pack was changed), and a new pack whose file is
// longer than its committed length 0: recover cuts it back (or removes a
// file whose record was lost). A crash after 4 finds the copies durable
// (3 came first) and the old packs recorded all dead: recover removes them
// (after checking that no chunk lies in them), or a file whose record
// went in 5. At every point the invariants that Check verifies hold once
// the store is open, and every live chunk has its bytes in exactly the
// place its record gives.

// DefaultCompactThreshold is the dead fraction from which a pack is
// rewritten: at 0.5 a rewrite copies at most as many bytes as it frees.
const DefaultCompactThreshold = 0.5

// CompactOptions configure Compact.
type CompactOptions struct {
	// Threshold is the dead fraction (dead / committed bytes) from which
	// a pack is rewritten; 0 means DefaultCompactThreshold. Packs with
	// nothing live are removed whatever the threshold.
	Threshold float64
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	// Progress, if set, is called as live bytes are copied, with the
	// bytes done and the bytes to copy in all.
	Progress func(done, total int64)
}

// CompactResult is what a compaction did (or, dry, would do).
type CompactResult struct {
	// PacksRewritten had live chunks copied out; PacksDeleted were
	// removed (rewritten ones and those with nothing live); PacksCreated
	// took the copies. PacksSkipped qualified but were held by an
	// appender or tainted.
	PacksRewritten, PacksDeleted, PacksCreated, PacksSkipped int
	// ChunksMoved and BytesCopied are the live chunks copied.
	ChunksMoved int
	BytesCopied int64
	// DiskBefore and DiskAfter are the disk space of the pack files
	// (allocated blocks), before and after; BytesReclaimed is their
	// difference (dry: the space of the packs to remove less the bytes to
	// copy, an estimate).
	DiskBefore, DiskAfter, BytesReclaimed int64
}

// Compact rewrites the packs whose dead fraction reaches opts.Threshold
// and removes those with nothing live (see the comment above). One
// compaction runs at a time; Check waits for it.
func (s *Store) Compact(ctx context.Context, opts CompactOptions) (*CompactResult, error) {
	if opts.Threshold <= 0 {
		opts.Threshold = DefaultCompactThreshold
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	res := &CompactResult{}
	if !opts.DryRun {
		defer s.compactions.count(res) // compactstats.go
	}
	var err error
	if res.DiskBefore, err = s.packsDisk(); err != nil {
		return nil, fmt.Errorf("compact %s: %w", s.dir, err)
	}
	cands, dead, err := s.compactCandidates(opts.Threshold, res)
	if err != nil {
		return nil, fmt.Errorf("compact %s: %w", s.dir, err)
	}
	if len(cands) == 0 && len(dead) == 0 {
		res.DiskAfter = res.DiskBefore
		return res, nil
	}
	if opts.DryRun {
		return s.compactDry(cands, dead, res)
	}
	// Take the candidates as held: no ingest appends to them from now on.
	taken := s.holdPacks(append(slices.Clone(cands), dead...))
	defer func() { s.unholdPacks(taken) }() // on errors; nil once given back
	if s.anyTainted(taken) {
		// A checkpoint covers every data record written so far; packs
		// still tainted after it are skipped.
		if err := s.checkpoint(); err != nil {
			return nil, fmt.Errorf("compact %s: checkpoint: %w", s.dir, err)
		}
	}
	cands = s.keepUntainted(cands, taken, res)
	dead = s.keepUntainted(dead, taken, res)
	live, err := s.liveChunks(cands)
	if err != nil {
		return nil, fmt.Errorf("compact %s: %w", s.dir, err)
	}
	var total int64
	for _, cs := range live {
		for _, c := range cs {
			total += c.loc.Len
		}
	}
	c := &compaction{s: s, ctx: ctx, res: res, progress: opts.Progress, total: total}
	// Rewrite in batches of about a pack's size of live bytes, each into
	// a new pack of its own with a transaction of its own.
	var batch []uint32
	var batchBytes int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := c.rewrite(batch, live)
		batch, batchBytes = nil, 0
		return err
	}
	for _, pack := range cands {
		var n int64
		for _, ch := range live[pack] {
			n += ch.loc.Len
		}
		if batchBytes > 0 && batchBytes+n > s.packBytes {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		batch = append(batch, pack)
		batchBytes += n
	}
	if err := flush(); err != nil {
		return nil, err
	}
	// The rewritten packs are all dead now, as are those that were.
	s.unholdPacks(taken)
	taken = nil
	gone := s.dropDeadPacks(append(cands, dead...))
	res.PacksDeleted = len(gone)
	if res.DiskAfter, err = s.packsDisk(); err != nil {
		return nil, fmt.Errorf("compact %s: %w", s.dir, err)
	}
	res.BytesReclaimed = res.DiskBefore - res.DiskAfter
	return res, nil
}

// compactCandidates reads the pack records: those at or past the
// threshold with something live, and those with nothing live. Packs held
// now are counted skipped.
func (s *Store) compactCandidates(threshold float64, res *CompactResult) (cands, dead []uint32, err error) {
	err = s.db.View(func(tx *manifest.Tx) error {
		packs, err := tx.Packs()
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for k, p := range packs {
			if p.Committed <= 0 {
				continue
			}
			all := isDead(p)
			if !all && float64(p.Dead) < threshold*float64(p.Committed) {
				continue
			}
			if s.held[k] && !s.idleAppenderLocked(k) {
				res.PacksSkipped++
				continue
			}
			if all {
				dead = append(dead, k)
			} else {
				cands = append(cands, k)
			}
		}
		return nil
	})
	slices.Sort(cands)
	slices.Sort(dead)
	return cands, dead, err
}

// idleAppenderLocked reports whether pack is held only by an appender
// that no ingest uses. Called with s.mu held.
func (s *Store) idleAppenderLocked(pack uint32) bool {
	sp := s.appending.byPack[pack]
	return sp != nil && sp.users == 0
}

// holdPacks marks those of packs that no one holds as held, and returns
// them. A pack open for appending that no ingest uses is closed first (as
// dropDeadPacks does): it is mostly dead, and the next ingest takes
// another.
func (s *Store) holdPacks(packs []uint32) map[uint32]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := map[uint32]bool{}
	for _, p := range packs {
		if s.held[p] && s.idleAppenderLocked(p) {
			s.closeAppendLocked(s.appending.byPack[p])
		}
		if !s.held[p] {
			s.held[p] = true
			taken[p] = true
		}
	}
	return taken
}

// unholdPacks gives back the packs holdPacks took.
func (s *Store) unholdPacks(taken map[uint32]bool) {
	if len(taken) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range taken {
		delete(s.held, p)
	}
}

func (s *Store) anyTainted(taken map[uint32]bool) bool {
	for p := range taken {
		if s.tainted(p) {
			return true
		}
	}
	return false
}

// keepUntainted keeps those of packs that this compaction holds and that
// no data record may write again.
func (s *Store) keepUntainted(packs []uint32, taken map[uint32]bool, res *CompactResult) []uint32 {
	return slices.DeleteFunc(packs, func(p uint32) bool {
		if !taken[p] || s.tainted(p) {
			res.PacksSkipped++
			return true
		}
		return false
	})
}

// liveChunk is a chunk to move.
type liveChunk struct {
	id  blockstore.ID
	loc blockstore.Loc
}

// liveChunks returns the chunks lying in packs, by pack, in pack order (a
// scan of the chunk records).
func (s *Store) liveChunks(packs []uint32) (map[uint32][]liveChunk, error) {
	out := map[uint32][]liveChunk{}
	if len(packs) == 0 {
		return out, nil
	}
	want := map[uint32]bool{}
	for _, p := range packs {
		want[p] = true
	}
	err := s.db.View(func(tx *manifest.Tx) error {
		clear(out)
		return tx.ForEachChunk(func(id blockstore.ID, c manifest.Chunk) error {
			if want[c.Loc.Pack] {
				out[c.Loc.Pack] = append(out[c.Loc.Pack], liveChunk{id, c.Loc})
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read chunk records: %w", err)
	}
	for _, cs := range out {
		slices.SortFunc(cs, func(a, b liveChunk) int { return int(a.loc.Off - b.loc.Off) })
	}
	return out, nil
}

// compactDry fills res with what Compact would do.
func (s *Store) compactDry(cands, dead []uint32, res *CompactResult) (*CompactResult, error) {
	live, err := s.liveChunks(cands)
	if err != nil {
		return nil, fmt.Errorf("compact %s: %w", s.dir, err)
	}
	var freed int64
	for _, p := range append(slices.Clone(cands), dead...) {
		freed += fileDisk(s.packs.Path(p))
	}
	for _, p := range cands {
		for _, c := range live[p] {
			res.ChunksMoved++
			res.BytesCopied += c.loc.Len
		}
	}
	res.PacksRewritten = len(cands)
	res.PacksDeleted = len(cands) + len(dead)
	if res.BytesCopied > 0 {
		res.PacksCreated = int((res.BytesCopied + s.packBytes - 1) / s.packBytes)
	}
	res.BytesReclaimed = max(0, freed-res.BytesCopied)
	res.DiskAfter = res.DiskBefore - res.BytesReclaimed
	return res, nil
}

// compaction is one Compact's rewriting.
type compaction struct {
	s        *Store
	ctx      context.Context
	res      *CompactResult
	progress func(done, total int64)
	done     int64
	total    int64
}

// rewrite copies the live chunks of packs into one new pack and switches
// their records to it (steps 1-4 of the comment above).
func (c *compaction) rewrite(packs []uint32, live map[uint32][]liveChunk) error {
	s := c.s
	var pack uint32
	err := s.db.Update(func(tx *manifest.Tx) (err error) {
		pack, err = s.allocPack(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("compact %s: allocate pack: %w", s.dir, err)
	}
	// The new pack is held until its records are in (then takePack may
	// open it for appending, and from then on it is not ours to give
	// back).
	unheld := false
	unhold := func() {
		if !unheld {
			unheld = true
			s.mu.Lock()
			delete(s.held, pack)
			s.mu.Unlock()
		}
	}
	defer unhold()
	app, err := s.packs.NewAppender(pack, 0)
	if err != nil {
		return fmt.Errorf("compact %s: %w", s.dir, err)
	}
	defer app.Close()
	switched := false
	defer func() {
		if !switched {
			// Nothing refers to the copies: cut the new pack back to its
			// committed length, as recover would.
			if err := app.Rollback(0); err != nil {
				s.log.Warn("compact: cut back a new pack", "pack", s.packs.Path(pack), "err", err)
			}
		}
	}()
	type move struct {
		id       blockstore.ID
		from, to blockstore.Loc
	}
	var moves []move
	var moved []uint32 // the packs whose every chunk was copied
	for _, p := range packs {
		ok := true
		var pm []move
		for _, ch := range live[p] {
			if err := c.ctx.Err(); err != nil {
				return err
			}
			buf := make([]byte, ch.loc.Len)
			if err := s.chunks.ReadChunk(buf, ch.id, ch.loc, true); err != nil {
				if s.chunkAt(ch.id, ch.loc) {
					// Still live there, and unreadable or wrong: leave
					// this pack as it is, for kvfs fsck.
					s.log.Error("compact: a live chunk does not read back; leaving its pack", "pack", s.packs.Path(p), "chunk", ch.id.String(), "err", err)
					ok = false
					break
				}
				continue // released meanwhile
			}
			to, err := app.Append(buf)
			if err != nil {
				return fmt.Errorf("compact %s: %w", s.dir, err)
			}
			pm = append(pm, move{ch.id, ch.loc, to})
			c.done += ch.loc.Len
			if c.progress != nil {
				c.progress(c.done, c.total)
			}
		}
		if ok {
			moves = append(moves, pm...)
			moved = append(moved, p)
		}
	}
	if len(moves) == 0 {
		// Nothing live to move after all: the new pack goes.
		switched = true
		if err := s.db.Update(func(tx *manifest.Tx) error { return tx.DeletePack(pack) }); err != nil {
			return fmt.Errorf("compact %s: forget an unused pack: %w", s.dir, err)
		}
		if err := s.packs.Remove(pack); err != nil {
			s.log.Warn("compact: remove an unused pack", "err", err)
		}
		return nil
	}
	if err := app.Sync(); err != nil {
		return fmt.Errorf("compact %s: %w", s.dir, err)
	}
	if err := syncDir(filepath.Join(s.dir, "packs")); err != nil {
		return fmt.Errorf("compact %s: %w", s.dir, err)
	}
	size := app.Size()
	var copied int64
	var n int
	seq, err := s.db.UpdateSeq(func(tx *manifest.Tx) error {
		copied, n = 0, 0
		deadOld := map[uint32]int64{}
		for _, m := range moves {
			ch, err := tx.Chunk(m.id)
			if errors.Is(err, manifest.ErrNotFound) || err == nil && ch.Loc != m.from {
				continue // released (and maybe stored again) meanwhile
			}
			if err != nil {
				return err
			}
			ch.Loc = m.to
			if err := tx.PutChunk(m.id, ch); err != nil {
				return err
			}
			deadOld[m.from.Pack] += m.from.Len
			copied += m.to.Len
			n++
		}
		for p, d := range deadOld {
			st, err := tx.Pack(p)
			if err != nil {
				return err
			}
			st.Dead += d
			if err := tx.PutPack(p, st); err != nil {
				return err
			}
		}
		return tx.PutPack(pack, manifest.Pack{Committed: size, Dead: size - copied})
	})
	if err != nil {
		return fmt.Errorf("compact %s: switch chunks to pack %s: %w", s.dir, s.packs.Path(pack), err)
	}
	switched = true // the index may refer to the copies from here on
	if err := s.db.Sync(seq); err != nil {
		return fmt.Errorf("compact %s: switch chunks to pack %s: %w", s.dir, s.packs.Path(pack), err)
	}
	c.res.PacksCreated++
	c.res.PacksRewritten += len(moved)
	c.res.ChunksMoved += n
	c.res.BytesCopied += copied
	unhold()
	// All its chunks released meanwhile: nothing live.
	s.dropDeadPacks([]uint32{pack})
	return nil
}

// chunkAt reports whether the index still has chunk id at loc.
func (s *Store) chunkAt(id blockstore.ID, loc blockstore.Loc) bool {
	var at bool
	s.db.View(func(tx *manifest.Tx) error {
		c, err := tx.Chunk(id)
		at = err == nil && c.Loc == loc
		return nil
	})
	return at
}

// packsDisk is the disk space of the pack files: their allocated blocks.
func (s *Store) packsDisk() (int64, error) {
	dir := filepath.Join(s.dir, "packs")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		n += fileDisk(filepath.Join(dir, e.Name()))
	}
	return n, nil
}

// fileDisk is a file's allocated bytes (st_blocks), 0 if it is gone.
func fileDisk(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}
