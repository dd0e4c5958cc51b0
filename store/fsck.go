package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// ErrInUse is the error of opening a store that another process (a
// mount, most often) holds: bbolt's file lock keeps a second opener out.
var ErrInUse = manifest.ErrInUse

// ProblemKind says what a Problem is and so what a repair does with it.
type ProblemKind int

const (
	// ProblemIndex: names, inodes or manifests disagree; Repair leaves
	// it (it cannot know which side is right).
	ProblemIndex ProblemKind = iota
	// ProblemRefs: a chunk's refcount differs from the manifests listing
	// it (Refs); Repair sets it (and frees a chunk no manifest lists).
	ProblemRefs
	// ProblemLost: a chunk's bytes are gone or wrong (outside or past the
	// end of its pack, punched, its pack missing, not matching its hash,
	// or not in the index at all); Repair marks the files that list it
	// damaged there and drops the chunk.
	ProblemLost
	// ProblemPack: a pack's file length or its dead count disagrees with
	// the index; Repair sets the committed length to what is on disk
	// (and forgets a missing pack) and recounts the dead bytes.
	ProblemPack
	// ProblemStrayPack: a pack file the index does not know; Repair
	// removes it (no chunk record points into it).
	ProblemStrayPack
	// ProblemBlobPins: a blob record's pins differ from the format-5
	// manifests listing it (Refs); Repair sets them.
	ProblemBlobPins
	// ProblemStrayXattrs: extended attributes of an inode that does not
	// exist (Ino); Repair deletes them.
	ProblemStrayXattrs
)

// Problem is one violation of the store's invariants (see Problems).
type Problem struct {
	Kind  ProblemKind
	Msg   string
	Chunk blockstore.ID  // ProblemRefs, ProblemLost
	Loc   blockstore.Loc // the chunk's place, when it has a record
	Refs  uint32         // the recomputed refcount or pins
	Pack  uint32         // ProblemPack, ProblemStrayPack
	Blob  string         // ProblemBlobPins
	Ino   uint64         // ProblemStrayXattrs
}

// ChunkUse is a place where a manifest lists a chunk: a file (its path,
// or "inode N (open, unlinked)" for an orphan, or "blob HASH" for a blob's
// content) and the file offset of the chunk there.
type ChunkUse struct {
	File string
	Off  int64
}

// DamagedFile is a file with byte ranges that fsck --repair marked lost.
type DamagedFile struct {
	File   string
	Ino    uint64
	Ranges []Range
}

// Range is the byte range [Off, Off+Len) of a file.
type Range struct{ Off, Len int64 }

// FormatRanges writes ranges as user.kvfs.damaged shows them: "START-END"
// (END exclusive), separated by commas.
func FormatRanges(rs []Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%d-%d", r.Off, r.Off+r.Len)
	}
	return strings.Join(parts, ",")
}

// Uses finds, in one pass over the manifests, where each of ids is listed,
// and every file with damaged ranges. fsck names files with them.
func (s *Store) Uses(ids []blockstore.ID) (map[blockstore.ID][]ChunkUse, []DamagedFile, error) {
	want := make(map[blockstore.ID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	uses := map[blockstore.ID][]ChunkUse{}
	var damaged []DamagedFile
	err := s.db.View(func(tx *manifest.Tx) error {
		scan := func(name func() string, ino uint64, m manifest.Manifest) {
			var off int64
			var d *DamagedFile
			for _, e := range m {
				switch {
				case e.Damaged:
					if d == nil {
						damaged = append(damaged, DamagedFile{File: name(), Ino: ino})
						d = &damaged[len(damaged)-1]
					}
					d.Ranges = append(d.Ranges, Range{off, e.Len})
				case !e.Zero && want[e.ID]:
					uses[e.ID] = append(uses[e.ID], ChunkUse{File: name(), Off: off})
				}
				off += e.Len
			}
		}
		err := tx.ForEachInode(func(n *manifest.Inode) error {
			if n.IsDir() {
				return nil
			}
			m, err := tx.Manifest(n.Ino)
			if err != nil {
				return nil // Problems reports it
			}
			scan(func() string { return inodePath(tx, n) }, n.Ino, m)
			return nil
		})
		if err != nil {
			return err
		}
		return tx.ForEachBlobRecord(func(h string, r *manifest.BlobRecord) error {
			if !r.HasContent {
				return nil
			}
			if m, err := tx.BlobContent(h); err == nil {
				scan(func() string { return "blob " + h }, 0, m)
			}
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("fsck %s: find files: %w", s.dir, err)
	}
	return uses, damaged, nil
}

// inodePath is an inode's path from the root, by its Parent and Name
// links, or how it is known when it has none.
func inodePath(tx *manifest.Tx, n *manifest.Inode) string {
	if n.Ino == manifest.RootIno {
		return "/"
	}
	if n.Name == "" {
		return fmt.Sprintf("inode %d (open, unlinked)", n.Ino)
	}
	var comps []string
	for cur := n; cur.Ino != manifest.RootIno && len(comps) < 4096; {
		comps = append(comps, cur.Name)
		p, err := tx.Inode(cur.Parent)
		if err != nil {
			return fmt.Sprintf("inode %d (.../%s)", n.Ino, strings.Join(comps, "/"))
		}
		cur = p
	}
	slices.Reverse(comps)
	return "/" + strings.Join(comps, "/")
}

// RepairResult is what Repair changed.
type RepairResult struct {
	Refcounts int           // chunk refcounts set (chunks freed included)
	Dropped   int           // lost chunks dropped from the index
	Packs     int           // pack records set or forgotten
	Removed   int           // stray pack files removed
	Other     int           // blob pins set, stray attributes deleted
	Damaged   []DamagedFile // files marked damaged now
}

// Repair fixes what problems (from Problems) allow, in one transaction:
// each file (and blob content) listing a lost chunk gets a damaged run in
// its place (reads of it fail with ErrDamaged; the rest of the file reads
// as before), the lost chunks leave the index, every refcount is
// recomputed from the manifests, each pack's committed length becomes
// what its file holds (a missing pack is forgotten) and its dead bytes
// what its live chunks leave. Then stray pack files are removed.
// ProblemIndex problems are left alone. The store must not be in use by
// anything else (kvfs fsck opens it offline).
func (s *Store) Repair(ctx context.Context, problems []Problem) (*RepairResult, error) {
	res := &RepairResult{}
	lost := map[blockstore.ID]bool{}
	var stray []uint32
	for _, p := range problems {
		switch p.Kind {
		case ProblemLost:
			lost[p.Chunk] = true
		case ProblemStrayPack:
			stray = append(stray, p.Pack)
		}
	}
	onDisk, err := s.packs.Packs()
	if err != nil {
		return nil, fmt.Errorf("repair %s: %w", s.dir, err)
	}
	err = s.db.Update(func(tx *manifest.Tx) error {
		*res = RepairResult{} // a retried transaction starts again
		refs := map[blockstore.ID]uint32{}
		// mark replaces the lost chunks of m by damaged runs.
		mark := func(m manifest.Manifest) (manifest.Manifest, []Range) {
			var rs []Range
			var off int64
			out := make(manifest.Manifest, len(m))
			for i, e := range m {
				if !e.Zero && lost[e.ID] {
					e = manifest.Extent{Zero: true, Damaged: true, Len: e.Len}
					if k := len(rs) - 1; k >= 0 && rs[k].Off+rs[k].Len == off {
						rs[k].Len += e.Len
					} else {
						rs = append(rs, Range{off, e.Len})
					}
				}
				out[i] = e
				off += e.Len
			}
			return out, rs
		}
		err := tx.ForEachInode(func(n *manifest.Inode) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if n.IsDir() {
				return nil
			}
			m, err := tx.Manifest(n.Ino)
			if err != nil {
				return nil // a ProblemIndex: left alone
			}
			if len(lost) > 0 {
				nm, rs := mark(m)
				if len(rs) > 0 {
					if err := tx.PutManifest(n.Ino, nm); err != nil {
						return err
					}
					n.ManifestID = nm.ID()
					if err := tx.PutInode(n); err != nil {
						return err
					}
					res.Damaged = append(res.Damaged, DamagedFile{File: inodePath(tx, n), Ino: n.Ino, Ranges: rs})
					m = nm
				}
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
		type blobFix struct {
			h string
			r *manifest.BlobRecord
			m manifest.Manifest
		}
		var blobFixes []blobFix
		err = tx.ForEachBlobRecord(func(h string, r *manifest.BlobRecord) error {
			fix := blobFix{h: h}
			if r.Pins != pins[h] {
				r.Pins = pins[h]
				fix.r = r
			}
			if r.HasContent {
				m, err := tx.BlobContent(h)
				if err != nil {
					return nil // a ProblemIndex
				}
				if len(lost) > 0 {
					if nm, rs := mark(m); len(rs) > 0 {
						fix.m, m = nm, nm
						res.Damaged = append(res.Damaged, DamagedFile{File: "blob " + h, Ranges: rs})
					}
				}
				for _, id := range m.Chunks() {
					refs[id]++
				}
			}
			if fix.r != nil || fix.m != nil {
				blobFixes = append(blobFixes, fix)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Writes after the iteration: a bucket must not change under its
		// own ForEach.
		for _, f := range blobFixes {
			if f.r != nil {
				res.Other++
				if err := tx.PutBlobRecord(f.h, f.r); err != nil {
					return err
				}
			}
			if f.m != nil {
				if err := tx.PutBlobContent(f.h, f.m); err != nil {
					return err
				}
			}
		}
		type chunkFix struct {
			id   blockstore.ID
			c    manifest.Chunk
			drop bool
		}
		var fixes []chunkFix
		live := map[uint32]int64{}
		ends := map[uint32]int64{} // the end of each pack's last chunk kept
		err = tx.ForEachChunk(func(id blockstore.ID, c manifest.Chunk) error {
			if !lost[id] && refs[id] > 0 {
				ends[c.Loc.Pack] = max(ends[c.Loc.Pack], c.Loc.End())
			}
			switch want := refs[id]; {
			case lost[id] || want == 0:
				fixes = append(fixes, chunkFix{id: id, c: c, drop: true})
				if lost[id] {
					res.Dropped++
				} else {
					res.Refcounts++
				}
			case want != c.Refs:
				c.Refs = want
				fixes = append(fixes, chunkFix{id: id, c: c})
				res.Refcounts++
				live[c.Loc.Pack] += c.Loc.Len
			default:
				live[c.Loc.Pack] += c.Loc.Len
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, f := range fixes {
			if f.drop {
				// Release deletes a record at refcount 1; the pack's dead
				// count is recomputed below.
				f.c.Refs = 1
				if err := tx.PutChunk(f.id, f.c); err != nil {
					return err
				}
				if _, err := tx.Release([]blockstore.ID{f.id}); err != nil {
					return err
				}
				continue
			}
			if err := tx.PutChunk(f.id, f.c); err != nil {
				return err
			}
		}
		packs, err := tx.Packs()
		if err != nil {
			return err
		}
		for pack, p := range packs {
			size, ok := onDisk[pack]
			if !ok && live[pack] == 0 {
				res.Packs++
				if err := tx.DeletePack(pack); err != nil {
					return err
				}
				continue
			}
			want := p
			if ok && size < p.Committed {
				want.Committed = size
			}
			if ends[pack] > want.Committed && (!ok || ends[pack] <= size) {
				// Its chunks lie in the file past a damaged length.
				want.Committed = ends[pack]
			}
			want.Dead = want.Committed - live[pack]
			if want != p {
				res.Packs++
				if err := tx.PutPack(pack, want); err != nil {
					return err
				}
			}
		}
		xattrs := []uint64{}
		err = tx.ForEachXattrIno(func(ino uint64) error {
			if _, err := tx.Inode(ino); errors.Is(err, manifest.ErrNotFound) {
				xattrs = append(xattrs, ino)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, ino := range xattrs {
			res.Other++
			if err := tx.DeleteXattrs(ino); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("repair %s: %w", s.dir, err)
	}
	if err := s.Sync(); err != nil {
		return nil, fmt.Errorf("repair %s: %w", s.dir, err)
	}
	for _, pack := range stray {
		if err := s.packs.Remove(pack); err != nil {
			return res, fmt.Errorf("repair %s: %w", s.dir, err)
		}
		res.Removed++
	}
	return res, nil
}
