package store

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Shared packs. The new chunks of many commits go into a few packs open for
// appending (at most maxAppendPacks while they are idle), each taking new
// chunks until it reaches the store's pack size: the number of packs grows
// with the bytes stored, not with the files. (Before, each commit of a
// mostly new file made its spool a pack of its own: 500 small files left 505
// packs.) Concurrent commits spread over the open packs, and share one when
// more commits run than packs are open.
//
// An ingest reserves each chunk's range under the appender's lock, fills it
// with positioned writes, makes them durable (an fsync of the pack, or, for
// a few new bytes, data records in the journal: inline.go), and then
// commits in one index transaction. Ranges are handed out in order, so the ranges of one pack
// tile it from its committed length at open up to its appender's end, each
// range belonging to one ingest, with at most a page's padding before an
// ingest's first range (so that its pages can be freed whole when it dies);
// but ingests commit in any order. Each commit's transaction therefore
// updates the pack's record by cover:
//
//   - a range of its own that ends at or below the recorded committed length
//     was covered by another commit, which counted it dead: it is taken out
//     of the dead count again (its chunks become live, or are counted dead
//     again one by one if a concurrent commit stored them first);
//   - a range above the committed length raises the committed length to its
//     end, and the bytes between (the ranges of ingests that have not
//     committed yet, or never will, and padding) are counted dead.
//
// A committed length is always the end of a range (or the length at open),
// so a range is never partly covered.
//
// So a commit may record a committed length that covers another ingest's
// range before that ingest has written or synced it. That is safe, because
// the index only ever promises two things about a pack's bytes:
//
//   - a chunk record points at bytes that were written and made durable
//     before the transaction that added the record (each ingest syncs its
//     own packs, or journals their bytes, before its commit; the range it
//     covers on someone else's behalf gets no chunk record, only dead
//     bytes, whose content is never read);
//   - the file is at least its committed length (the commit raising it wrote
//     its own range up to that length and fsynced the file, length included,
//     or journaled the length with its bytes, which replay restores)
//     and every byte below it is live or dead (live + dead = committed, which
//     Check verifies and dead-pack removal trusts).
//
// The dead count of a pack never exceeds what is really dead while ingests
// are in flight: a range counted dead on behalf of an ingest is only made
// live by that ingest's own commit, in the transaction that adds its chunks.
// A pack with ranges in flight is never removed (it has users), so a pack
// counted all dead because of them is not lost.
//
// After a crash, the bytes past a pack's committed length (reserved, maybe
// written and synced, but not committed) are cut off when the store opens
// (recover), and a pack is truncated to its committed length whenever it is
// opened for appending (NewAppender), so a pack's file is exactly its
// committed length again. While the store runs, the same holds whenever no
// ingest uses a pack: the last one to finish cuts off what failed ingests
// left past the committed length. A failed ingest punches out the ranges
// it wrote (dead once covered, and their space is what a full disk needs
// back), and a commit punches out the chunks it wrote that a concurrent
// commit stored first.
//
// Lock order: s.opening, then a bbolt write transaction, then s.mu, then
// an appender's own lock; s.mu is never held while waiting for a
// transaction.

// maxAppendPacks is how many packs stay open for appending when no ingest
// uses them: each keeps a descriptor open. More are opened while more
// ingests run at once, and closed as they finish; a pack closed before it
// is full is found again through the index, by its committed length.
const maxAppendPacks = 4

// sharedPack is a pack open for appending, shared by the ingests that
// reserve ranges in it.
type sharedPack struct {
	app *blockstore.Appender
	// The fields below are guarded by Store.mu.
	//
	// users counts the ingests holding ranges in the pack, from their
	// first reservation until they finish: while it is not 0, the pack is
	// neither cut back, nor closed, nor removed.
	users int
	// committed is the pack's committed length in the index, as of the
	// last commit that raised it.
	committed int64
	// full: the pack takes no new ingests; it is closed when its last
	// user finishes.
	full bool
}

// packSlot is a shared pack as one ingest uses it.
type packSlot struct {
	*sharedPack
	// end is the end of the ingest's last range in the pack: a range that
	// follows it directly needs no alignment (blockstore TryReserve).
	end int64
}

// appendPacks are a store's packs open for appending. Guarded by Store.mu.
type appendPacks struct {
	// open lists the packs taking new ingests.
	open []*sharedPack
	// byPack holds every pack with an appender: those open and those full
	// but still in use. Each is in Store.held too.
	byPack map[uint32]*sharedPack
}

// reserve places n new bytes: in the pack that this ingest appended to
// last while it has room, otherwise in another pack open for appending,
// and returns the pack's appender and the range, which the caller fills.
func (in *ingest) reserve(n int64) (*blockstore.Appender, blockstore.Loc, error) {
	s := in.s
	if k := len(in.slots); k > 0 {
		slot := in.slots[k-1]
		if loc, ok := slot.app.TryReserve(n, s.packBytes, slot.end); ok {
			slot.end = loc.End()
			return slot.app, loc, nil
		}
	}
	for fresh := false; ; fresh = true {
		if sp, loc, ok := s.reserveOpen(in, n); ok {
			return sp.app, loc, nil
		}
		// One pack is opened at a time, so that ingests starting together
		// do not each open one: look again once it is this one's turn.
		s.opening.Lock()
		if sp, loc, ok := s.reserveOpen(in, n); ok {
			s.opening.Unlock()
			return sp.app, loc, nil
		}
		sp, err := s.takePack(n, fresh)
		if err != nil {
			s.opening.Unlock()
			return nil, blockstore.Loc{}, err
		}
		s.mu.Lock()
		s.appending.open = append(s.appending.open, sp)
		s.appending.byPack[sp.app.Pack()] = sp
		loc, ok := sp.app.TryReserve(n, s.packBytes, -1)
		if ok {
			sp.users++
			in.slots = append(in.slots, &packSlot{sharedPack: sp, end: loc.End()})
		}
		s.mu.Unlock()
		s.opening.Unlock()
		if ok {
			return sp.app, loc, nil
		}
		// No room after all (no other ingest saw the pack before this
		// one reserved, so this is takePack's misjudgement): a new pack.
	}
}

// reserveOpen reserves n bytes in an open pack: one this ingest uses
// already, else an idle one, else (when maxAppendPacks are open) the one
// with the fewest users. A pack without room for n is full. It reports
// false when another pack should be opened.
func (s *Store) reserveOpen(in *ingest, n int64) (*sharedPack, blockstore.Loc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		// The best pack is one this ingest uses already, then the one with
		// the fewest users.
		var best *sharedPack
		var mine *packSlot
		for _, sp := range s.appending.open {
			m := in.slot(sp)
			if best == nil || m != nil && mine == nil || (m == nil) == (mine == nil) && sp.users < best.users {
				best, mine = sp, m
			}
		}
		if best == nil {
			return nil, blockstore.Loc{}, false
		}
		if mine == nil && best.users > 0 && len(s.appending.open) < s.appendPacks {
			return nil, blockstore.Loc{}, false // spread concurrent ingests
		}
		after := int64(-1)
		if mine != nil {
			after = mine.end
		}
		if loc, ok := best.app.TryReserve(n, s.packBytes, after); ok {
			if mine == nil {
				best.users++
				mine = &packSlot{sharedPack: best}
				in.slots = append(in.slots, mine)
			}
			mine.end = loc.End()
			return best, loc, true
		}
		s.retireLocked(best)
	}
}

// slot is the ingest's slot of sp, or nil.
func (in *ingest) slot(sp *sharedPack) *packSlot {
	for _, p := range in.slots {
		if p.sharedPack == sp {
			return p
		}
	}
	return nil
}

// retireLocked takes a pack out of the open list: it takes no new
// ingests, and is closed once its users have finished (now, if it has
// none). Called with s.mu held.
func (s *Store) retireLocked(sp *sharedPack) {
	sp.full = true
	s.appending.open = slices.DeleteFunc(s.appending.open, func(p *sharedPack) bool { return p == sp })
	if sp.users == 0 {
		s.closeAppendLocked(sp)
	}
}

// closeAppendLocked closes an unused pack's appender and lets takePack
// hand the pack out again (by its committed length in the index). Called
// with s.mu held; the caller then offers the pack to dropDeadPacks.
func (s *Store) closeAppendLocked(sp *sharedPack) {
	sp.app.Close()
	s.appending.open = slices.DeleteFunc(s.appending.open, func(p *sharedPack) bool { return p == sp })
	delete(s.appending.byPack, sp.app.Pack())
	delete(s.held, sp.app.Pack())
}

// takePack opens a pack for appending: one of the index's packs with room
// for n more bytes (from the next page on) that no appender holds (after a
// restart, or closed before it was full), otherwise, or if fresh, a new
// pack.
func (s *Store) takePack(n int64, fresh bool) (*sharedPack, error) {
	var pack uint32
	var committed int64
	var created bool
	err := s.db.Update(func(tx *manifest.Tx) error {
		pack, committed, created = 0, 0, false
		packs, err := tx.Packs()
		if err != nil {
			return err
		}
		s.mu.Lock()
		for k, p := range packs {
			start := (p.Committed + blockstore.PageSize - 1) / blockstore.PageSize * blockstore.PageSize
			if !fresh && !s.held[k] && start+n <= s.packBytes && (pack == 0 || k > pack) && !s.tainted(k) {
				pack, committed = k, p.Committed
			}
		}
		if pack != 0 {
			s.held[pack] = true
		}
		s.mu.Unlock()
		if pack != 0 {
			return nil
		}
		created = true
		pack, err = s.allocPack(tx)
		return err
	})
	if err == nil {
		var app *blockstore.Appender
		if app, err = s.packs.NewAppender(pack, committed); err == nil && created {
			// A commit's fsync of the pack, or its data record, does not
			// make the new file's name durable.
			if err = syncDir(filepath.Join(s.dir, "packs")); err != nil {
				app.Close()
			}
		}
		if err == nil {
			return &sharedPack{app: app, committed: committed}, nil
		}
	}
	if pack != 0 {
		s.mu.Lock()
		delete(s.held, pack)
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("allocate pack: %w", err)
}

// cover computes a pack's committed length and the change of its dead
// count when a commit whose own ranges in the pack are ranges (sorted by
// offset) is recorded over committed (see the comment at the top of this
// file).
func cover(committed int64, ranges []blockstore.Loc) (int64, int64, error) {
	var dead int64
	for _, r := range ranges {
		switch {
		case r.End() <= committed:
			dead -= r.Len // covered by another commit, which counted it dead
		case r.Off >= committed:
			dead += r.Off - committed
			committed = r.End()
		default:
			return 0, 0, fmt.Errorf("reserved range [%d,+%d) straddles the committed length %d", r.Off, r.Len, committed)
		}
	}
	return committed, dead, nil
}

// ownRanges returns the ranges this ingest wrote, by pack, sorted by
// offset.
func (in *ingest) ownRanges() map[uint32][]blockstore.Loc {
	out := map[uint32][]blockstore.Loc{}
	for _, st := range in.states {
		if st.written {
			out[st.loc.Pack] = append(out[st.loc.Pack], st.loc)
		}
	}
	for _, r := range out {
		slices.SortFunc(r, func(a, b blockstore.Loc) int { return int(a.Off - b.Off) })
	}
	return out
}

// recordPacks updates, in the commit transaction, the records of the
// shared packs this ingest appended to (see cover), adding dead, the bytes
// of chunks it wrote that a concurrent ingest stored first. It returns the
// new committed lengths, for committed once the transaction commits.
func (in *ingest) recordPacks(tx *manifest.Tx, dead map[uint32]int64) (map[uint32]int64, error) {
	ranges := in.ownRanges()
	lengths := map[uint32]int64{}
	for _, sp := range in.slots {
		pack := sp.app.Pack()
		st, err := tx.Pack(pack)
		if err != nil {
			return nil, err
		}
		c, d, err := cover(st.Committed, ranges[pack])
		if err != nil {
			return nil, fmt.Errorf("pack %s: %w", in.s.packs.Path(pack), err)
		}
		st.Committed = c
		st.Dead += d + dead[pack]
		if err := tx.PutPack(pack, st); err != nil {
			return nil, err
		}
		lengths[pack] = c
	}
	return lengths, nil
}

// committed notes the committed lengths of a commit that succeeded.
func (in *ingest) committed(lengths map[uint32]int64) {
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	for _, sp := range in.slots {
		sp.committed = max(sp.committed, lengths[sp.app.Pack()])
	}
}

// sync makes every appended chunk durable before the commit's record: by
// an fsync of each pack it appended to or, when its new bytes are few, by
// data records ahead of its commit's (inline.go), synced with it.
func (in *ingest) sync() error {
	s := in.s
	ranges := in.ownRanges()
	var n int64
	for _, sp := range in.slots {
		for _, r := range ranges[sp.app.Pack()] {
			n += r.Len
		}
	}
	if n > 0 && s.inlines(n) {
		return in.journalBytes(ranges)
	}
	for _, p := range in.slots {
		if err := p.app.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// journalBytes appends a data record per shared pack with the ingest's
// ranges in it, read back from the pack, and notes each record's
// sequence number: should the commit fail, the pack is tainted (finish).
func (in *ingest) journalBytes(ranges map[uint32][]blockstore.Loc) error {
	for _, sp := range in.slots {
		pack := sp.app.Pack()
		rs := ranges[pack]
		if len(rs) == 0 {
			continue
		}
		pairs := make([][2]int64, len(rs))
		for i, r := range rs {
			pairs[i] = [2]int64{r.Off, r.Len}
		}
		end := rs[len(rs)-1].End()
		read := func(off, n int64, b []byte) error { return sp.app.ReadAt(b, off) }
		if src, ok := in.src.(memSource); ok {
			read = in.readFromMem(src, pack)
		}
		rec, err := in.s.encodeData(pack, end, pairs, read)
		if err != nil {
			return fmt.Errorf("journal new chunks: %w", err)
		}
		seq, err := in.s.appendData(pack, rec)
		if in.journaled == nil {
			in.journaled = map[uint32]taint{}
		}
		if err != nil {
			// The record may be in the journal's file all the same.
			seq = math.MaxUint64
		}
		in.journaled[pack] = taint{seq: seq, end: end}
		if err != nil {
			return err
		}
	}
	return nil
}

// readFromMem reads the ingest's ranges of pack from its source in
// memory (memSource), where the bytes it wrote there came from, rather
// than back from the pack: each range is one new chunk, at the source
// offset of its state.
func (in *ingest) readFromMem(src memSource, pack uint32) func(off, n int64, b []byte) error {
	at := map[int64]int64{} // pack offset -> source offset
	for _, st := range in.states {
		if st.written && st.loc.Pack == pack {
			at[st.loc.Off] = st.off
		}
	}
	return func(off, n int64, b []byte) error {
		so, ok := at[off]
		if !ok {
			return fmt.Errorf("no chunk of this commit at offset %d of pack %d", off, pack)
		}
		_, err := src.ReadAt(b, so)
		return err
	}
}

// finish gives up the ingest's packs, committed or not. A pack whose last
// user this was is cut back to its committed length (dropping what failed
// ingests left past it), and closed if full or if more than
// maxAppendPacks are open. err must be nil if the commit transaction
// committed: otherwise the ingest's ranges, live chunks now, are punched.
func (in *ingest) finish(err error) {
	s := in.s
	if in.txDone {
		err = nil // only its sync failed: nothing to roll back
	}
	if a := in.adopted; a != nil {
		if err != nil {
			// Give the spool back to its writer, and forget the pack.
			if rerr := os.Rename(s.packs.Path(a.pack), a.spoolPath); rerr != nil {
				s.log.Error("return spool after a failed commit", "spool", a.spoolPath, "err", rerr)
			}
			s.db.Update(func(tx *manifest.Tx) error { return tx.DeletePack(a.pack) })
		}
		s.mu.Lock()
		delete(s.held, a.pack)
		s.mu.Unlock()
		if err == nil {
			// Dead already if a concurrent ingest stored all of its new
			// chunks first.
			s.dropDeadPacks([]uint32{a.pack})
		}
	}
	if err != nil {
		in.punchUncommitted()
		// Its data records may outlive it in the journal: its packs take
		// no more ingests, and are not opened again, until a checkpoint
		// covers them (inline.go).
		for pack, t := range in.journaled {
			s.taintPack(pack, t.seq, t.end)
		}
	}
	var closed []uint32
	s.mu.Lock()
	for _, sp := range in.slots {
		if _, ok := in.journaled[sp.app.Pack()]; ok && err != nil {
			sp.full = true
			s.appending.open = slices.DeleteFunc(s.appending.open, func(p *sharedPack) bool { return p == sp.sharedPack })
		}
		sp.users--
		if sp.users > 0 {
			continue
		}
		if sp.app.Size() != sp.committed {
			if rerr := sp.app.Rollback(sp.committed); rerr != nil {
				s.log.Warn("roll back pack", "err", rerr)
				sp.full = true // the open store cuts it again
			}
		}
		if sp.full {
			s.closeAppendLocked(sp.sharedPack)
			closed = append(closed, sp.app.Pack())
		}
	}
	for len(s.appending.open) > s.appendPacks {
		i := slices.IndexFunc(s.appending.open, func(sp *sharedPack) bool { return sp.users == 0 })
		if i < 0 {
			break
		}
		sp := s.appending.open[i]
		s.closeAppendLocked(sp)
		closed = append(closed, sp.app.Pack())
	}
	s.mu.Unlock()
	in.slots = nil
	s.dropDeadPacks(closed)
}

// punchUncommitted frees the disk space of the ranges that a failed
// ingest wrote into shared packs. They are dead: a later commit counts
// them so when its committed length covers them, and otherwise the last
// user cuts them off; but a range counted dead is never punched as a
// released chunk is, and on a full disk (where ingests fail) its space is
// what removals need. The ingest still holds its packs, so no one else
// reserves or cuts these ranges meanwhile.
func (in *ingest) punchUncommitted() {
	byPack := map[uint32][]blockstore.Loc{}
	for _, sp := range in.slots {
		byPack[sp.app.Pack()] = nil
	}
	for _, st := range in.states {
		if l, ok := byPack[st.loc.Pack]; ok && st.written {
			byPack[st.loc.Pack] = append(l, st.loc)
		}
	}
	for pack, locs := range byPack {
		if len(locs) == 0 {
			continue
		}
		if err := in.s.packs.Punch(pack, locs); err != nil {
			in.s.log.Warn("punch the ranges of a failed commit", "err", err)
		}
	}
}

// closeAppendPacks closes every appender, when the store closes.
func (s *Store) closeAppendPacks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.appending.byPack {
		s.closeAppendLocked(sp)
	}
}
