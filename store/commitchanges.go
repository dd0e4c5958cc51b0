package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// A file written through the mount changes a few chunks of a large file
// more often than it replaces the whole: an fsync after a 4 KiB write into
// 256 MiB must cost a chunk, not the file. CommitChanges commits a new
// version described as changes to the current one. The file is seen as a
// grid of cells of the store's chunk size C (cell i is [i·C, (i+1)·C)); a
// plain file's manifest is on that grid (its chunks are cut every C bytes
// from 0), so an unchanged cell is an unchanged chunk: its manifest entry is
// reused as it is, and only the changed (dirty) cells are read, hashed and
// stored. A dirty cell whose sha256 the writer computed as it wrote the
// cell whole is not even read, unless its bytes are new to the store.

// errChangedBase: the version that changes were made to is no longer the
// file's current one.
var errChangedBase = errors.New("previous version replaced")

// DirtyChunk is a cell of the grid whose bytes changed.
type DirtyChunk struct {
	Index int64 // the cell [Index·C, (Index+1)·C) ∩ [0, Size)
	// Sum is the sha256 of the cell's bytes when Summed, computed as they
	// were written (a full cell only; ignored for a shorter last cell).
	Sum    blockstore.ID
	Summed bool
}

// Changes describes a new version of a file as changes to its current
// version.
type Changes struct {
	Size int64 // the new size
	// Keep is how much of the current version's content is still in
	// place: a cell that is not dirty holds the current version's bytes
	// below Keep and zeros from Keep on. Keep is at most the current
	// size; a truncation lowers it (a cell that a truncation cuts is
	// dirty), and 0 says nothing is kept (O_TRUNC, a new file).
	Keep int64
	// Dirty are the changed cells, by ascending Index. A cell below Keep
	// whose length changes (the current version's last, shorter cell,
	// when the file grows) must be dirty, or the commit fails.
	Dirty []DirtyChunk
	// Spool holds every dirty cell's bytes at its offset (and nothing
	// else: it may be sparse). With CommitOptions.Adopt it may become a
	// pack, as CommitIno's source does.
	Spool *os.File
	// Mem, when Spool is nil, holds what Spool would, in memory (a small
	// file's spool, fs's in-memory spool): bytes past its end are zeros.
	// The commit reads its chunks, writes them into the pack and, when it
	// journals them, takes the journal's bytes from it, with no read of a
	// file or of the pack. It must not change until the commit returns.
	Mem []byte
	// BlobSum, when BlobSummed, is the sha256 of the whole new content,
	// computed as it was written. A blob's commit (a file in a blocks
	// directory, named by that sha256) with nothing kept takes it, and
	// the sums of the dirty cells, instead of reading and hashing the
	// whole file. Other commits ignore it.
	BlobSum    blockstore.ID
	BlobSummed bool
	// Pieces, for a new snapshot written in order (nothing kept), are
	// sums of chunks of its plan that the writer computed as it wrote
	// them (SnapshotPieces): a whole-content commit takes the sum of a
	// chunk at the same offset and of the same length instead of hashing
	// it. Other commits ignore them.
	Pieces []Piece
}

// Piece is a range of a file, [Off, Off+N), and, when Summed, the sha256
// of its bytes.
type Piece struct {
	Off, N int64
	Sum    blockstore.ID
	Summed bool
	// Cut says that the piece ends where its content says (CutSegment):
	// a commit that cuts the file by content may take it as its own cut.
	// A row's piece ends where the writer's plan said, which is no cut
	// of the file's content: when the commit does not plan the file as
	// the writer did (a llama.cpp file it refuses, and cuts by content
	// instead), it must not cut there (red team, issue 29: a refused
	// file of 2M rows was cut into 256-byte rows, and its commit failed).
	Cut bool
}

// spoolSource is the source of the dirty cells' bytes: the spool file, or
// the spool held in memory.
func (ch Changes) spoolSource() io.ReaderAt {
	if ch.Spool == nil {
		return memSource(ch.Mem)
	}
	return ch.Spool
}

// CommitChanges commits ch as the new content of the file whose current
// inode is ino, like CommitIno: unchanged cells reuse the current
// version's chunks (each gets a reference from the new manifest in the
// commit's transaction; the current version's references go when it is
// released, as for any commit), and only the dirty cells are chunked.
//
// src is the whole new content. It is read only when the change cannot be
// committed as changes, and then whole, as by CommitIno: a file whose name
// makes it a snapshot (.mlxkv, chunked by tensor rows from its header) or
// a blob (a blocks directory: named by the sha256 of its whole content),
// or whose current version is not on the chunk grid (stored from a
// snapshot, or by a store with another chunk size). With nothing kept
// (Keep 0), that full commit reads the spool itself, which then holds the
// whole content, and may adopt it.
func (s *Store) CommitChanges(ctx context.Context, ino uint64, ch Changes, src io.ReaderAt, opts CommitOptions) (*FileInfo, *PutStats, error) {
	var comps []string
	var prev *manifest.Inode
	var pm manifest.Manifest
	err := s.db.View(func(tx *manifest.Tx) error {
		n, err := commitTarget(tx, ino)
		if err != nil {
			return err
		}
		comps, prev = inoComps(tx, n), n
		if ch.Keep > 0 {
			pm, err = tx.Manifest(ino)
		}
		return err
	})
	if err != nil {
		return nil, nil, inoErr("commit", ino, "", err)
	}
	C := s.chunkSize
	// A blob is chunked on the grid, as a plain file is; only its name
	// needs the whole content, and the writer hashed that already.
	blob := inBlocksDir(comps) && ch.Keep == 0 && ch.BlobSummed
	cdc := s.cutsByContent()
	byExtent := false
	switch {
	case blob:
	case ch.Keep == 0 && (wholeContent(comps) || sniff(ch.spoolSource(), ch.Size) != kindPlain):
		// All of the content is new: planned from it as a Put is (a
		// snapshot or another engine's file by its rows, whatever its
		// name).
		return s.commitIno(ctx, ino, ch.spoolSource(), ch.Size, opts, ch.Pieces)
	case ch.Keep == 0 && cdc:
		// A new file of no parsed format: its written cells cut by
		// content, the rest (holes: a truncate that grows, a sparse cp)
		// zero runs, never read.
		byExtent = true
	case ch.Keep > 0 && (wholeContent(comps) || src != nil && sniff(src, ch.Size) != kindPlain):
		return s.CommitIno(ctx, ino, src, ch.Size, opts)
	case ch.Keep > 0 && !onGrid(pm, C):
		if !cdc {
			return s.CommitIno(ctx, ino, src, ch.Size, opts)
		}
		byExtent = true
	}
	in := &ingest{s: s, src: ch.spoolSource(), size: ch.Size, comps: comps, target: ino,
		opts: PutOptions{Mtime: opts.Mtime}, ctime: opts.Ctime, states: map[blockstore.ID]*chunkState{},
		hold: opts.Hold, plan: &plan{kind: kindPlain}}
	if blob {
		in.plan.kind, in.blobSum = kindBlob, ch.BlobSum.String()
	}
	if opts.Adopt && ch.Spool != nil && !(byExtent && ch.Keep > 0) {
		in.adopt = ch.Spool
	}
	plan := in.planChanges
	if byExtent {
		plan = in.planExtentChanges
		if ch.Keep > 0 {
			// The chunks the changes touch are cut again whole, from the
			// new content (src): their unchanged bytes are not in the
			// spool.
			in.src = src
		} else {
			in.useKnown(ch.Pieces) // the writer's cuts and sums
		}
	}
	if err := plan(ch, pm); err != nil {
		return nil, nil, inoErr("commit", ino, "", err)
	}
	if ch.Keep > 0 {
		in.prevManifest = prev.ManifestID
	}
	in.stats.Changes = true
	in.movePins(ino, opts)
	fi, err := in.run(ctx)
	in.finish(err)
	if err != nil {
		return nil, nil, inoErr("commit", ino, "", err)
	}
	return fi, &in.stats, nil
}

// ChunkedWhole reports whether a file named name in a directory named
// dir is chunked from its whole content (a snapshot, cut by tensor rows;
// a blob, hashed whole), not on the grid of cells: CommitChanges then
// reads and hashes all of it, so a writer that hashed its cells as they
// were written (fs's spool) did that work for nothing (issue 9: a cp of a
// 1 GiB snapshot hashed it twice). The name may change before the commit;
// the sums are only ever a shortcut.
func ChunkedWhole(dir, name string) bool { return wholeContent([]string{dir, name}) }

// InBlocksDir reports whether a file in a directory named dir is a blob
// (an engine block, named by the sha256 of its content).
func InBlocksDir(dir string) bool { return inBlocksDir([]string{dir, ""}) }

// wholeContent reports whether a file at comps is chunked from its whole
// content (see planFor): a blob, or a snapshot.
func wholeContent(comps []string) bool {
	name := comps[len(comps)-1]
	return inBlocksDir(comps) || strings.HasSuffix(name, ".mlxkv") || strings.HasSuffix(name, ".mlxkv.tmp")
}

// onGrid reports whether every extent of m starts at a multiple of C and
// every chunk is at most C long (zero runs may be longer): then each cell
// of the grid is one chunk, or part of a zero run.
func onGrid(m manifest.Manifest, C int64) bool {
	var off int64
	for _, e := range m {
		if off%C != 0 || !e.Zero && e.Len > C {
			return false
		}
		off += e.Len
	}
	return true
}

// planChanges plans a commit of changes: the dirty cells become the
// regions to chunk (runs of cells to hash, and cells hashed already), and
// the cells between them are kept (in.keep): the previous version's
// extents below Keep, zero runs above it.
func (in *ingest) planChanges(ch Changes, pm manifest.Manifest) error {
	C := in.s.chunkSize
	size := ch.Size
	keep := min(ch.Keep, size)
	if keep > pm.Size() {
		return fmt.Errorf("changes keep %d bytes of a %d-byte version", ch.Keep, pm.Size())
	}
	if !sort.SliceIsSorted(ch.Dirty, func(i, j int) bool { return ch.Dirty[i].Index < ch.Dirty[j].Index }) {
		return errors.New("dirty chunks out of order")
	}
	// starts[k] is where pm's extent k begins.
	starts := make([]int64, len(pm))
	var off int64
	for k, e := range pm {
		starts[k] = off
		off += e.Len
	}
	// gap keeps [a, b), which lies between dirty cells.
	gap := func(a, b int64) error {
		if a >= b {
			return nil
		}
		below := min(b, keep)
		k := sort.Search(len(pm), func(k int) bool { return starts[k]+pm[k].Len > a })
		for pos := a; pos < below; k++ {
			e, start := pm[k], starts[k]
			end := min(start+e.Len, below)
			if e.Damaged {
				// Lost bytes must not become zeros that read back as
				// written: a file with damaged runs is changed by
				// rewriting it whole (fsck.go).
				return fmt.Errorf("keep bytes [%d,%d) of the previous version: %w", pos, end, ErrDamaged)
			}
			if e.Zero {
				in.keep = append(in.keep, chunkRef{off: pos, n: end - pos, zero: true})
				in.stats.ZeroBytes += end - pos
			} else {
				// A kept chunk is the same cell in both versions: whole,
				// or the last and still last.
				if start != pos || start+e.Len > below || e.Len != C && start+e.Len != size {
					return fmt.Errorf("chunk at %d (%d bytes) changed but is not dirty (kept %d bytes, size %d)",
						start, e.Len, keep, size)
				}
				in.keep = append(in.keep, chunkRef{off: pos, n: e.Len, id: e.ID})
				if _, ok := in.states[e.ID]; !ok {
					in.states[e.ID] = &chunkState{off: pos}
				}
				in.stats.ReusedBytes += e.Len
			}
			pos = end
		}
		if from := max(a, below); from < b {
			in.keep = append(in.keep, chunkRef{off: from, n: b - from, zero: true})
			in.stats.ZeroBytes += b - from
		}
		return nil
	}
	var pos int64 // the end of the last dirty cell
	for i, d := range ch.Dirty {
		a := d.Index * C
		if d.Index < 0 || a >= size || i > 0 && d.Index == ch.Dirty[i-1].Index {
			return fmt.Errorf("dirty chunk %d of a %d-byte file", d.Index, size)
		}
		b := min(a+C, size)
		if err := gap(pos, a); err != nil {
			return err
		}
		regs := &in.plan.regions
		last := len(*regs) - 1
		switch {
		case d.Summed && b-a == C:
			*regs = append(*regs, region{off: a, n: C, known: true, sum: d.Sum})
		case last >= 0 && !(*regs)[last].known && (*regs)[last].off+(*regs)[last].n == a:
			(*regs)[last].n += b - a // one run to hash
		default:
			*regs = append(*regs, region{off: a, n: b - a})
		}
		pos = b
	}
	if err := gap(pos, size); err != nil {
		return err
	}
	if in.keep == nil {
		in.keep = []chunkRef{} // merged even when nothing is kept
	}
	return nil
}

// mergeRefs merges two lists of chunk references, each in file order, into
// one in file order.
func mergeRefs(a, b []chunkRef) []chunkRef {
	out := make([]chunkRef, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].off < b[0].off {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// movePins records the pins of the replaced version ino that the commit
// drops (CommitOptions.Unhold, Close).
func (in *ingest) movePins(ino uint64, opts CommitOptions) {
	if opts.Unhold {
		in.pinsMoved++
	}
	for _, f := range opts.Close {
		if f != nil && f.ino == ino {
			in.pinsMoved++
			in.closeFiles = append(in.closeFiles, f)
		}
	}
}

// IndexedOnRename reports whether a committed file renamed from oldName in
// a directory named oldDir to newName in newDir must be committed again,
// from its own bytes, to be what its new name says: a snapshot (.mlxkv,
// outside a blocks directory) that was stored under a name that made it
// no snapshot (cp to a temporary name, then mv; rsync's .name.XXXXXX).
// Kinds are chosen by name at commit (planFor), and a rename changes no
// content; without the new commit such a snapshot was never indexed, so
// neither found by its prefix nor viewable (red team 11). The engine's own
// NAME.mlxkv.tmp is a snapshot's name already.
func IndexedOnRename(oldDir, oldName, newDir, newName string) bool {
	isSnap := func(dir, name string) bool {
		return dir != "blocks" && (strings.HasSuffix(name, ".mlxkv") || strings.HasSuffix(name, ".mlxkv.tmp"))
	}
	return isSnap(newDir, newName) && !isSnap(oldDir, oldName)
}
