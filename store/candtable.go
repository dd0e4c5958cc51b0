package store

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// The candidate table: what an eviction pass needs to know of each file
// (inode, last use, uses, GreedyDual base, cost, whether it is pinned or a
// listed engine block, and its bytes), kept in memory so that a pass costs
// what it evicts, not what the store holds. It is built by one walk of the
// index at the first pass (paid once per daemon start, with writers held
// off for that walk) and from then on kept up to date by the index's change
// feed (manifest.DB.Watch): each commit reports the inodes and blobs it
// touched and the change in live chunk bytes, and the next pass re-reads
// those inodes, in the read transaction it chooses in. No store path needs
// a hook of its own, so none can forget one.
//
// What a file would free (its unshared chunks: refcount 1, 2 for a blob
// with content) also changes when another file's commit or removal moves a
// shared chunk's refcount between 1 and 2 (or 2 and 3). The feed reports
// those chunks, and the table keeps, for each chunk that its entries list,
// the entries listing it (owners), so that the next pass re-reads those: a
// pass's table holds every candidate's exact bytes as of its transaction.
// (The cheaper alternative, an upper bound per file with exact bytes read
// only for the candidates a pass reaches, was measured: in a store of
// prefix-growth series, where every file but the longest of its series
// frees little of its bytes, the bound is loose for nearly every file, and
// a cost-size pass read nearly all of them, slower than the walk.) The
// price is memory: each chunk of each candidate, about 100 bytes (a
// 64 KiB chunk each: 0.15% of the stored bytes). gc.PlanBounded still
// takes the bytes as upper bounds and reads the exact bytes of the
// candidates it reaches from the transaction, so what a victim frees is
// the index's word, not the table's. The table may still be stale for a
// victim by the time it is removed: EvictVictims checks each again under
// the lock.

// candTable is the candidate table; its zero value is unbuilt.
type candTable struct {
	mu    sync.Mutex // held by a pass: build, refresh and choose
	built bool
	// ents are the entries, dense so that a pass lists them at memory
	// speed; pos is each inode's index in ents.
	ents []candEntry
	pos  map[uint64]int
	buf  []Candidate // a pass's list, reused
	// owners are, for each chunk an entry lists, the entries listing it.
	owners map[blockstore.ID][]uint64

	fmu    sync.Mutex // guards what the feed fills in
	dirty  map[uint64]struct{}
	blobs  map[string]struct{}
	chunks map[blockstore.ID]struct{} // whose refcount crossed 1–2 or 2–3
	stored int64                      // live chunk bytes, kept by the feed
}

// candEntry is a file that is a candidate apart from being open or a young
// engine block (both change without a commit, so a pass checks them).
type candEntry struct {
	ino     uint64
	blob    string // the blob's sha256, for an engine block
	ctime   int64
	lastUse int64
	uses    uint64
	base    float64
	cost    float64
	bytes   int64 // what evicting it frees: its chunks no other file lists
	chunks  []blockstore.ID
}

// feed is the change feed's function: it only notes, the pass reads.
func (t *candTable) feed(ch *manifest.Changes) {
	t.fmu.Lock()
	defer t.fmu.Unlock()
	for ino := range ch.Inodes {
		t.dirty[ino] = struct{}{}
	}
	for h := range ch.Blobs {
		t.blobs[h] = struct{}{}
	}
	for id := range ch.Chunks {
		t.chunks[id] = struct{}{}
	}
	t.stored += ch.Stored
}

// build fills the table from tx: one walk of the chunks, the attributes'
// inodes and the inodes (Candidates' walk).
func (s *Store) buildTable(tx *manifest.Tx) error {
	t := &s.retain.table
	chunks := map[blockstore.ID]chunkUse{}
	var stored int64
	err := tx.ForEachChunk(func(id blockstore.ID, c manifest.Chunk) error {
		stored += c.Loc.Len
		chunks[id] = chunkUse{c.Refs, c.Loc.Len}
		return nil
	})
	if err != nil {
		return err
	}
	pinned, err := pinnedInos(tx)
	if err != nil {
		return err
	}
	tokens := tokenCounts(tx)
	var ents []candEntry
	pos := map[uint64]int{}
	owners := map[blockstore.ID][]uint64{}
	err = tx.ForEachInode(func(n *manifest.Inode) error {
		if pinned[n.Ino] {
			return nil
		}
		e, _, err := candEntryOf(tx, n, chunksIn(chunks), tokens)
		if err != nil || e == nil {
			return err
		}
		pos[n.Ino] = len(ents)
		ents = append(ents, *e)
		for _, id := range e.chunks {
			owners[id] = append(owners[id], n.Ino)
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.fmu.Lock()
	t.ents, t.pos, t.owners, t.built, t.stored = ents, pos, owners, true, stored
	t.dirty, t.blobs, t.chunks = map[uint64]struct{}{}, map[string]struct{}{}, map[blockstore.ID]struct{}{}
	t.fmu.Unlock()
	return nil
}

type chunkUse struct {
	refs uint32
	n    int64
}

// pinnedInos returns the pinned files, from the few inodes with attributes
// (a lookup per inode, failing for most, was a quarter of a walk).
func pinnedInos(tx *manifest.Tx) (map[uint64]bool, error) {
	pinned := map[uint64]bool{}
	err := tx.ForEachXattrIno(func(ino uint64) error {
		if _, err := tx.Xattr(ino, PinXattr); err == nil {
			pinned[ino] = true
		}
		return nil
	})
	return pinned, err
}

// candEntryOf returns n's entry (nil if it is no candidate whatever
// happens without a commit: a directory, an orphan, a listed engine block,
// a file with no content yet; a pinned one the caller excludes), and the
// exact bytes evicting it frees now. chunk and tokens look chunks and
// snapshot token counts up.
func candEntryOf(tx *manifest.Tx, n *manifest.Inode, chunk func(blockstore.ID) (chunkUse, bool), tokens func(layout string, ino uint64) int) (*candEntry, int64, error) {
	if n.IsDir() || n.Parent == 0 {
		return nil, 0, nil
	}
	// A blob's chunks hold one reference from the file and one from the
	// blob record; evicting the file releases the record too (evictTx),
	// so both count as its own.
	own := uint32(1)
	if n.Blob != "" {
		r, err := tx.BlobRecord(n.Blob)
		if err == nil && r.Pins > 0 {
			return nil, 0, nil // a manifest lists it
		}
		if err == nil && r.HasContent {
			own = 2
		}
	}
	m, err := tx.Manifest(n.Ino)
	if err != nil {
		return nil, 0, nil // no content yet
	}
	e := &candEntry{ino: n.Ino, blob: n.Blob, ctime: n.Ctime, lastUse: max(n.LastUse, n.AccessTime()),
		uses: n.Uses, base: math.Float64frombits(n.UseAge), cost: 1}
	e.chunks = m.Chunks()
	for _, id := range e.chunks {
		ch, ok := chunk(id)
		if !ok {
			return nil, 0, fmt.Errorf("chunk %s of inode %d: %w", id, n.Ino, manifest.ErrNotFound)
		}
		if ch.refs <= own {
			e.bytes += ch.n
		}
	}
	if n.Layout != "" {
		if t := tokens(n.Layout, n.Ino); t > 0 {
			e.cost = float64(t)
		}
	}
	return e, e.bytes, nil
}

// chunksIn looks chunks up in chunks, read beforehand in one walk.
func chunksIn(chunks map[blockstore.ID]chunkUse) func(blockstore.ID) (chunkUse, bool) {
	return func(id blockstore.ID) (chunkUse, bool) {
		c, ok := chunks[id]
		return c, ok
	}
}

// tokenCounts gives the token count the snapshot index holds for an inode
// under a layout key, reading each layout's index once, the first time it
// is asked for (a walk over every inode asks for every one).
func tokenCounts(tx *manifest.Tx) func(layout string, ino uint64) int {
	tokens := map[string]map[uint64]int{} // layout → ino → tokens
	return func(layout string, ino uint64) int {
		byIno, ok := tokens[layout]
		if !ok {
			byIno = map[uint64]int{}
			tx.Snapshots(layout, func(ino uint64, t []byte) error {
				byIno[ino] = len(t) / 4
				return nil
			})
			tokens[layout] = byIno
		}
		return byIno[ino]
	}
}

// lookupChunk looks chunks up in tx, one by one.
func lookupChunk(tx *manifest.Tx) func(blockstore.ID) (chunkUse, bool) {
	return func(id blockstore.ID) (chunkUse, bool) {
		c, err := tx.Chunk(id)
		return chunkUse{c.Refs, c.Loc.Len}, err == nil
	}
}

// refresh re-reads inode ino into the table.
func (s *Store) refreshEntry(tx *manifest.Tx, ino uint64) error {
	t := &s.retain.table
	t.remove(ino)
	n, err := tx.Inode(ino)
	if err != nil {
		return nil // removed
	}
	if _, err := tx.Xattr(ino, PinXattr); err == nil {
		return nil
	}
	e, _, err := candEntryOf(tx, n, lookupChunk(tx), tx.SnapshotTokenCount)
	if err != nil || e == nil {
		return err
	}
	t.pos[ino] = len(t.ents)
	t.ents = append(t.ents, *e)
	for _, id := range e.chunks {
		t.owners[id] = append(t.owners[id], ino)
	}
	return nil
}

// remove drops inode ino's entry, if any, moving the last into its place.
func (t *candTable) remove(ino uint64) {
	i, ok := t.pos[ino]
	if !ok {
		return
	}
	for _, id := range t.ents[i].chunks {
		o := t.owners[id]
		for j, x := range o {
			if x == ino {
				o[j] = o[len(o)-1]
				o = o[:len(o)-1]
				break
			}
		}
		if len(o) == 0 {
			delete(t.owners, id)
		} else {
			t.owners[id] = o
		}
	}
	last := len(t.ents) - 1
	if i != last {
		t.ents[i] = t.ents[last]
		t.pos[t.ents[i].ino] = i
	}
	t.ents = t.ents[:last]
	delete(t.pos, ino)
}

// ensureTable builds the table if it is not yet (under t.mu).
func (s *Store) ensureTable() error {
	t := &s.retain.table
	if t.built {
		return nil
	}
	t.fmu.Lock()
	t.dirty, t.blobs, t.chunks = map[uint64]struct{}{}, map[string]struct{}{}, map[blockstore.ID]struct{}{}
	t.fmu.Unlock()
	if err := s.db.Watch(s.buildTable, t.feed); err != nil {
		return fmt.Errorf("candidate table %s: %w", s.dir, err)
	}
	return nil
}

// LiveBytes is the bytes of live chunks (StoredBytes), from the candidate
// table: a walk of the index the first time, then free.
func (s *Store) LiveBytes() (int64, error) {
	t := &s.retain.table
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := s.ensureTable(); err != nil {
		return 0, err
	}
	t.fmu.Lock()
	defer t.fmu.Unlock()
	return t.stored, nil
}

// TableChoice is what ChooseFromTable gives its function.
type TableChoice struct {
	// Cands are the candidates, valid only during the call. Their Bytes
	// are the table's (exact as of the transaction); Exact sets a candidate's Bytes to what
	// evicting it frees, from the index.
	Cands  []Candidate
	Exact  func(c *Candidate) error
	Stored int64 // the stored bytes
}

// ChooseFromTable brings the candidate table up to date and calls choose
// with its candidates, in one read transaction (Exact reads in it). It
// builds the table first if needed.
func (s *Store) ChooseFromTable(choose func(TableChoice) error) error {
	return s.chooseFromTable(func(c TableChoice, _ *manifest.Tx) error { return choose(c) })
}

// chooseFromTable is ChooseFromTable, giving choose the transaction too
// (a test compares with candidates computed from scratch in it).
func (s *Store) chooseFromTable(choose func(TableChoice, *manifest.Tx) error) error {
	t := &s.retain.table
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := s.ensureTable(); err != nil {
		return err
	}
	var dirty map[uint64]struct{}
	var blobs map[string]struct{}
	var chunks map[blockstore.ID]struct{}
	var stored int64
	err := s.db.ViewWatched(func() {
		t.fmu.Lock()
		dirty, blobs, chunks, stored = t.dirty, t.blobs, t.chunks, t.stored
		t.dirty, t.blobs, t.chunks = map[uint64]struct{}{}, map[string]struct{}{}, map[blockstore.ID]struct{}{}
		t.fmu.Unlock()
	}, func(tx *manifest.Tx) error {
		for id := range chunks {
			for _, ino := range t.owners[id] {
				dirty[ino] = struct{}{}
			}
		}
		for h := range blobs {
			tx.BlobInodes(h, func(ino uint64) bool {
				dirty[ino] = struct{}{}
				return true
			})
		}
		for ino := range dirty {
			if err := s.refreshEntry(tx, ino); err != nil {
				return err
			}
		}
		s.mu.Lock()
		open := make(map[uint64]bool, len(s.open))
		for ino, n := range s.open {
			open[ino] = n > 0
		}
		s.mu.Unlock()
		s.retain.mu.Lock()
		pending := make(map[uint64]useNote, len(s.retain.uses))
		for ino, u := range s.retain.uses {
			pending[ino] = *u
		}
		s.retain.mu.Unlock()
		now := time.Now()
		young := now.Add(-s.blobGrace).UnixNano()
		fresh := s.freshSince(now)
		cands := t.buf[:0]
		for i := range t.ents {
			e := &t.ents[i]
			if open[e.ino] || e.ctime > fresh || (e.blob != "" && (e.ctime > young || s.seenNow(e.blob, now.UnixNano()))) {
				continue
			}
			c := Candidate{Ino: e.ino, LastUse: e.lastUse, Uses: e.uses, Base: e.base, Cost: e.cost, Bytes: e.bytes}
			if u, ok := pending[e.ino]; ok {
				c.LastUse, c.Uses, c.Base = max(c.LastUse, u.last), c.Uses+u.n, u.age
			}
			cands = append(cands, c)
		}
		t.buf = cands
		return choose(TableChoice{Cands: cands, Stored: stored, Exact: func(c *Candidate) error {
			n, err := tx.Inode(c.Ino)
			if err != nil {
				return fmt.Errorf("inode %d: %w", c.Ino, err)
			}
			_, exact, err := candEntryOf(tx, n, lookupChunk(tx), tx.SnapshotTokenCount)
			c.Bytes = exact
			return err
		}}, tx)
	})
	if err != nil {
		// What was not refreshed is refreshed next time.
		t.fmu.Lock()
		for ino := range dirty {
			t.dirty[ino] = struct{}{}
		}
		for h := range blobs {
			t.blobs[h] = struct{}{}
		}
		for id := range chunks {
			t.chunks[id] = struct{}{}
		}
		t.fmu.Unlock()
		return fmt.Errorf("choose from candidate table %s: %w", s.dir, err)
	}
	return nil
}
