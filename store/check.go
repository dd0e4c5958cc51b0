package store

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// CheckOptions select the expensive checks.
type CheckOptions struct {
	// Verify reads every chunk and checks its sha256 (verify.go: packs
	// are read front to back in large reads, hashed in parallel).
	Verify bool
	// Progress, if set, is called as chunks are verified with the bytes
	// done and the bytes to verify in all; from several goroutines.
	Progress func(done, total int64)
	// Live checks a store in use (fsck through a mounted daemon's control
	// socket, checklive.go): what ingests, removals and punches in flight
	// show for a moment is not reported, only what a second look confirms.
	Live bool
}

// Check verifies the store's invariants and returns every violation found
// (joined, at most 100), or nil. Problems lists the same violations one by
// one, for kvfs fsck.
func (s *Store) Check(ctx context.Context, opts CheckOptions) error {
	problems, err := s.Problems(ctx, opts)
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		return nil
	}
	msgs := make([]string, 0, min(len(problems), 100))
	for _, p := range problems[:min(len(problems), 100)] {
		msgs = append(msgs, p.Msg)
	}
	return fmt.Errorf("check %s: %d problem(s):\n  %s", s.dir, len(problems), strings.Join(msgs, "\n  "))
}

// Problems checks the store's invariants and returns every violation:
//
//   - each chunk's refcount equals the number of committed manifests
//     listing it (files' and blob records'), every listed chunk is in the
//     index, and no chunk record has a zero refcount;
//   - each blob record's pins equal the format-5 manifests listing it;
//   - every chunk lies inside its pack's committed length and its file,
//     no two chunks overlap, and a chunk with a hole in its range
//     (punched, or a sparse spool adopted as is) still matches its hash;
//   - each pack's file is exactly its committed length (no ingest may be in
//     flight while Check runs), and its live chunks and dead bytes add up
//     to that length (dead packs are removed by their dead count, so it
//     must never exceed what is really dead);
//   - every name points at an existing inode, every inode but the root and
//     the orphans has exactly one name, which its own Parent and Name give
//     byte for byte, and every file's manifest adds up to its size;
//   - every extended attribute belongs to an existing inode.
//
// It reads a consistent snapshot of the index in one transaction.
func (s *Store) Problems(ctx context.Context, opts CheckOptions) ([]Problem, error) {
	if opts.Live {
		return s.liveProblems(ctx, opts)
	}
	return s.problems(ctx, opts)
}

// problems is Problems of one look.
func (s *Store) problems(ctx context.Context, opts CheckOptions) ([]Problem, error) {
	s.compactMu.Lock() // no pack half rewritten (compact.go)
	defer s.compactMu.Unlock()
	s.WaitReclaim() // every queued punch done: the packs as they stay
	var problems []Problem
	add := func(p Problem) { problems = append(problems, p) }
	bad := func(format string, args ...any) {
		add(Problem{Kind: ProblemIndex, Msg: fmt.Sprintf(format, args...)})
	}
	var chunks []chunkInfo
	var onDisk map[uint32]int64
	err := s.db.View(func(tx *manifest.Tx) error {
		refs := map[blockstore.ID]uint32{}
		names := map[uint64]int{}
		orphans, err := tx.Orphans()
		if err != nil {
			return err
		}
		isOrphan := map[uint64]bool{}
		for _, o := range orphans {
			isOrphan[o] = true
		}
		err = tx.ForEachInode(func(n *manifest.Inode) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if n.IsDir() {
				ents, err := tx.ReadDir(n.Ino)
				if err != nil {
					return err
				}
				for _, e := range ents {
					names[e.Ino]++
					if _, err := tx.Inode(e.Ino); err != nil {
						bad("directory %d entry %q: inode %d: %v", n.Ino, e.Name, e.Ino, err)
					}
				}
				return nil
			}
			m, err := tx.Manifest(n.Ino)
			if err != nil {
				bad("inode %d: %v", n.Ino, err)
				return nil
			}
			if m.Size() != n.Size {
				bad("inode %d: manifest covers %d bytes, size is %d", n.Ino, m.Size(), n.Size)
			}
			for _, id := range m.Chunks() {
				refs[id]++
			}
			return nil
		})
		if err != nil {
			return err
		}
		pins, err := countPins(tx)
		if err != nil {
			return err
		}
		err = tx.ForEachBlobRecord(func(h string, r *manifest.BlobRecord) error {
			if r.Pins != pins[h] {
				add(Problem{Kind: ProblemBlobPins, Blob: h, Refs: pins[h], Msg: fmt.Sprintf("blob %s: %d pins, listed by %d format-5 manifests", h, r.Pins, pins[h])})
			}
			delete(pins, h)
			if !r.HasContent {
				return nil
			}
			m, err := tx.BlobContent(h)
			if err != nil {
				bad("blob %s: %v", h, err)
				return nil
			}
			for _, id := range m.Chunks() {
				refs[id]++
			}
			return nil
		})
		if err != nil {
			return err
		}
		for h, n := range pins {
			bad("blob %s listed by %d format-5 manifests has no record", h, n)
		}
		err = tx.ForEachInode(func(n *manifest.Inode) error {
			want := 1
			if n.Ino == manifest.RootIno || isOrphan[n.Ino] {
				want = 0
			}
			if names[n.Ino] != want {
				bad("inode %d has %d names, want %d", n.Ino, names[n.Ino], want)
			}
			// An inode's own link is how a commit finds its name.
			if cur, err := tx.Lookup(n.Parent, n.Name); want == 1 && (err != nil || cur != n.Ino) {
				bad("inode %d is named %q in directory %d, but that entry leads to %d (%v)", n.Ino, n.Name, n.Parent, cur, err)
			} else if want == 0 && n.Name != "" {
				bad("inode %d has no entry but is named %q in directory %d", n.Ino, n.Name, n.Parent)
			}
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.ForEachXattrIno(func(ino uint64) error {
			if _, err := tx.Inode(ino); err != nil {
				add(Problem{Kind: ProblemStrayXattrs, Ino: ino, Msg: fmt.Sprintf("extended attributes of inode %d, which does not exist: %v", ino, err)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		packs, err := tx.Packs()
		if err != nil {
			return err
		}
		onDisk, err = s.packs.Packs()
		if err != nil {
			return err
		}
		var held map[uint32]bool // live: packs being appended to (checklive.go)
		if opts.Live {
			held = s.heldPacks()
		}
		live := map[uint32]int64{}
		err = tx.ForEachChunk(func(id blockstore.ID, c manifest.Chunk) error {
			chunks = append(chunks, chunkInfo{id, c})
			live[c.Loc.Pack] += c.Loc.Len
			if got := refs[id]; got != c.Refs || got == 0 {
				add(Problem{Kind: ProblemRefs, Chunk: id, Loc: c.Loc, Refs: got,
					Msg: fmt.Sprintf("chunk %s: refcount %d, listed by %d manifests", id, c.Refs, got)})
			}
			delete(refs, id)
			p, ok := packs[c.Loc.Pack]
			size, onFile := onDisk[c.Loc.Pack]
			switch {
			case !ok || c.Loc.Off < 0 || c.Loc.Len <= 0:
				add(Problem{Kind: ProblemLost, Chunk: id, Loc: c.Loc,
					Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d): no such pack in the index", id, c.Loc.Pack, c.Loc.Off, c.Loc.Len)})
			case onFile && c.Loc.End() > size:
				add(Problem{Kind: ProblemLost, Chunk: id, Loc: c.Loc,
					Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d) past the end of the pack file (%d bytes)", id, c.Loc.Pack, c.Loc.Off, c.Loc.Len, size)})
			case c.Loc.End() > p.Committed && !onFile:
				add(Problem{Kind: ProblemLost, Chunk: id, Loc: c.Loc,
					Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d) outside the committed %d bytes", id, c.Loc.Pack, c.Loc.Off, c.Loc.Len, p.Committed)})
			case c.Loc.End() > p.Committed:
				// The bytes are in the file: the pack's record is wrong
				// (Repair raises its committed length), not the chunk.
				add(Problem{Kind: ProblemPack, Pack: c.Loc.Pack, Chunk: id, Loc: c.Loc,
					Msg: fmt.Sprintf("pack %s: chunk %s at [%d,+%d) lies past the committed length %d, inside the file", s.packs.Path(c.Loc.Pack), id, c.Loc.Off, c.Loc.Len, p.Committed)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for id, n := range refs {
			add(Problem{Kind: ProblemLost, Chunk: id, Refs: n, Msg: fmt.Sprintf("chunk %s listed by %d manifests is not in the index", id, n)})
		}
		for pack, p := range packs {
			if size, ok := onDisk[pack]; !ok && p.Committed > 0 {
				add(Problem{Kind: ProblemPack, Pack: pack, Msg: fmt.Sprintf("pack %s is missing", s.packs.Path(pack))})
			} else if ok && size != p.Committed && !(held[pack] && size > p.Committed) {
				add(Problem{Kind: ProblemPack, Pack: pack, Msg: fmt.Sprintf("pack %s is %d bytes, committed length %d", s.packs.Path(pack), size, p.Committed)})
			}
			if live[pack]+p.Dead != p.Committed {
				add(Problem{Kind: ProblemPack, Pack: pack, Msg: fmt.Sprintf("pack %s: %d live and %d dead bytes, committed length %d", s.packs.Path(pack), live[pack], p.Dead, p.Committed)})
			}
		}
		for pack := range onDisk {
			if _, ok := packs[pack]; !ok && !held[pack] {
				add(Problem{Kind: ProblemStrayPack, Pack: pack, Msg: fmt.Sprintf("pack %s is not in the index", s.packs.Path(pack))})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check %s: %w", s.dir, err)
	}
	sort.Slice(chunks, func(i, j int) bool {
		a, b := chunks[i].c.Loc, chunks[j].c.Loc
		return a.Pack < b.Pack || a.Pack == b.Pack && a.Off < b.Off
	})
	lost := map[blockstore.ID]bool{}
	for _, p := range problems {
		if p.Kind == ProblemLost {
			lost[p.Chunk] = true
		}
	}
	var buf []byte
	var toVerify []chunkInfo
	for i, ci := range chunks {
		loc := ci.c.Loc
		if i > 0 {
			if prev := chunks[i-1].c.Loc; prev.Pack == loc.Pack && prev.End() > loc.Off {
				bad("chunks %s and %s overlap in pack %d", chunks[i-1].id, ci.id, loc.Pack)
			}
		}
		if lost[ci.id] {
			continue // outside its pack: reported
		}
		if _, ok := onDisk[loc.Pack]; !ok {
			add(Problem{Kind: ProblemLost, Chunk: ci.id, Loc: loc, Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d): the pack file %s is missing", ci.id, loc.Pack, loc.Off, loc.Len, s.packs.Path(loc.Pack))})
			continue
		}
		if opts.Verify {
			toVerify = append(toVerify, ci)
			continue
		}
		pf, err := s.packs.Acquire(loc.Pack)
		if err != nil {
			bad("chunk %s at pack %d [%d,+%d): %v", ci.id, loc.Pack, loc.Off, loc.Len, err) // the file is there: not a loss to repair
			continue
		}
		// A hole in a live chunk is not wrong in itself: a sparse spool
		// (cp of a sparse file) adopted as a pack keeps its holes, which
		// read as the zeros that were written. It is wrong when the
		// chunk's bytes no longer match its hash — a punch of live data —
		// so such a chunk is verified whatever opts.Verify says.
		holed := false
		if hole, err := nextHole(pf.File(), loc.Off); err == nil && hole < loc.End() {
			holed = true
		}
		pf.Release()
		if holed {
			if int64(cap(buf)) < loc.Len {
				buf = make([]byte, loc.Len)
			}
			if err := s.packs.ReadChunk(buf[:loc.Len], ci.id, loc, true); err != nil {
				add(Problem{Kind: ProblemLost, Chunk: ci.id, Loc: loc, Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d) has a hole and does not match its hash: %v", ci.id, loc.Pack, loc.Off, loc.Len, err)})
			}
		}
	}
	if opts.Verify {
		if err := s.verifyChunks(ctx, toVerify, opts.Progress, add); err != nil {
			return nil, fmt.Errorf("check %s: %w", s.dir, err)
		}
	}
	return problems, nil
}

// countPins counts, for each blob, the format-5 manifests listing it: what
// its record's pins must be.
func countPins(tx *manifest.Tx) (map[string]uint32, error) {
	pins := map[string]uint32{}
	err := tx.ForEachInode(func(n *manifest.Inode) error {
		for _, h := range tx.Pins(n.Ino) {
			pins[h]++
		}
		return nil
	})
	return pins, err
}
