package fs

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
)

// spool is a file being written: the changes to its committed version
// (base), until they are committed. Opening a large file to change a few
// bytes must not copy it, and committing the change must not rehash it
// (store.CommitChanges), so the spool records only what was written, by
// cells of the store's chunk size C (cell i is [i·C, (i+1)·C)): a written
// cell is dirty and the spool file holds all of its bytes at their offset
// (the committed bytes of a cell that a write covers only in part are
// copied in first); every other cell reads from base below keep, and is
// zeros from keep on. The spool file is sparse and always as long as the
// file. Methods are called with the node's mu held.
type spool struct {
	f     *os.File
	size  int64
	dirty bool // changed since the last commit
	// mtime and ctime are the times the commit gives the new version:
	// those of the last write or truncation, or the mtime a utimensat set
	// after it (see keepTimes). Valid while dirty.
	mtime, ctime time.Time

	C int64
	// base is the committed version that the spool changes (pinned while
	// the spool lives); nil when nothing of it is kept.
	base *store.File
	// keep is how much of base is still in place: a truncation lowers it
	// (the bytes past it are gone even if the file grows again).
	keep  int64
	cells map[int64]*cell // the dirty cells
	// noHash turns off hashing while writing (for measurements).
	noHash bool
}

// cell is a dirty cell. A cell written whole and in order from its start
// (the engine writes rows sequentially) is hashed as the bytes arrive, so
// that its commit does not read and hash it again; any other write into it
// drops the hash.
type cell struct {
	h      hash.Hash // sha256 of [start, next) while written in order
	next   int64
	sum    blockstore.ID
	summed bool
}

// newSpool starts a spool in dir over base (nil for an empty file).
func newSpool(dir string, base *store.File, C int64, noHash bool) (*spool, error) {
	f, err := os.CreateTemp(dir, "w-")
	if err != nil {
		return nil, fmt.Errorf("create spool: %w", err)
	}
	sp := &spool{f: f, C: C, base: base, cells: map[int64]*cell{}, noHash: noHash}
	if base != nil {
		sp.size, sp.keep = base.Size(), base.Size()
		if err := f.Truncate(sp.size); err != nil {
			sp.close(true)
			return nil, fmt.Errorf("size spool %s: %w", f.Name(), err)
		}
	}
	return sp, nil
}

// modified records a change of the content: the file's mtime and ctime
// are now, until a utimensat sets the mtime.
func (sp *spool) modified() {
	now := time.Now()
	sp.dirty, sp.mtime, sp.ctime = true, now, now
}

// close drops the spool: its file (removed unless the store adopted it)
// and its pin of base.
func (sp *spool) close(remove bool) {
	sp.f.Close()
	if remove {
		os.Remove(sp.f.Name())
	}
	sp.dropBase()
}

func (sp *spool) dropBase() {
	if sp.base != nil {
		sp.base.Close()
		sp.base = nil
	}
}

// materialize makes clean cell i dirty, copying in its committed bytes.
func (sp *spool) materialize(i int64) error {
	a := i * sp.C
	if b := min(a+sp.C, sp.keep); sp.base != nil && a < b {
		buf := make([]byte, b-a)
		if _, err := sp.base.ReadAt(buf, a); err != nil && err != io.EOF {
			return fmt.Errorf("read committed bytes at %d: %w", a, err)
		}
		if _, err := sp.f.WriteAt(buf, a); err != nil {
			return fmt.Errorf("copy committed bytes at %d to spool: %w", a, err)
		}
	}
	sp.cells[i] = &cell{}
	return nil
}

// materializeEnd makes the last cell dirty if it is short and kept: a file
// that grows changes it (its committed chunk is shorter than the cell).
func (sp *spool) materializeEnd() error {
	if sp.size%sp.C == 0 {
		return nil
	}
	i := sp.size / sp.C
	if sp.cells[i] != nil || i*sp.C >= sp.keep {
		return nil
	}
	return sp.materialize(i)
}

// write writes data at off.
func (sp *spool) write(data []byte, off int64) (int, error) {
	end := off + int64(len(data))
	if len(data) == 0 {
		return 0, nil
	}
	if end > sp.size {
		if err := sp.materializeEnd(); err != nil {
			return 0, err
		}
	}
	first, last := off/sp.C, (end-1)/sp.C
	for i := first; i <= last; i++ {
		if sp.cells[i] != nil {
			continue
		}
		a, b := max(off, i*sp.C), min(end, i*sp.C+sp.C)
		if i*sp.C < sp.keep && (a > i*sp.C || b < min(i*sp.C+sp.C, sp.keep)) {
			if err := sp.materialize(i); err != nil {
				return 0, err
			}
		} else {
			sp.cells[i] = &cell{}
		}
	}
	n, err := sp.f.WriteAt(data, off)
	if e := off + int64(n); e > sp.size {
		sp.size = e
	}
	for i := first; i <= last; i++ {
		c := sp.cells[i]
		a, b := max(off, i*sp.C), min(off+int64(n), i*sp.C+sp.C)
		if err != nil || sp.noHash || a >= b {
			c.h, c.summed = nil, false
			continue
		}
		c.hash(data[a-off:b-off], a, b, i*sp.C, sp.C)
	}
	return n, err
}

// hash follows a write of seg to [a, b) of the cell that starts at start.
func (c *cell) hash(seg []byte, a, b, start, C int64) {
	switch {
	case a == start && b == start+C:
		c.h, c.sum, c.summed = nil, blockstore.Sum(seg), true
		return
	case a == start:
		c.h, c.summed = sha256.New(), false
	case c.h != nil && a == c.next:
	default:
		c.h, c.summed = nil, false
		return
	}
	c.h.Write(seg)
	c.next = b
	if b == start+C {
		c.h.Sum(c.sum[:0])
		c.h, c.summed = nil, true
	}
}

// truncate sets the file's size.
func (sp *spool) truncate(size int64) error {
	switch {
	case size < sp.size:
		if k := size / sp.C; size%sp.C != 0 {
			if sp.cells[k] == nil && k*sp.C < sp.keep {
				if err := sp.materialize(k); err != nil {
					return err
				}
			}
			if c := sp.cells[k]; c != nil {
				c.summed = false // a shorter cell
				if c.h != nil && c.next > size {
					c.h = nil
				}
			}
		}
		for i := range sp.cells {
			if i*sp.C >= size {
				delete(sp.cells, i)
			}
		}
		sp.keep = min(sp.keep, size)
		if sp.keep == 0 {
			sp.dropBase() // nothing of it is left
		}
	case size > sp.size:
		if err := sp.materializeEnd(); err != nil {
			return err
		}
	}
	if err := sp.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate spool %s: %w", sp.f.Name(), err)
	}
	sp.size = size
	return nil
}

// fromBase reports whether the byte at pos reads from base.
func (sp *spool) fromBase(pos int64) bool {
	return pos < sp.keep && sp.cells[pos/sp.C] == nil
}

// ReadAt reads the file's bytes as written so far (io.ReaderAt: the
// source of a commit that needs the whole content).
func (sp *spool) ReadAt(p []byte, off int64) (int, error) {
	if off >= sp.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), sp.size)
	for pos := off; pos < end; {
		base := sp.fromBase(pos)
		next := min((pos/sp.C+1)*sp.C, end)
		for next < end && sp.fromBase(next) == base {
			next = min(next+sp.C, end)
		}
		var src io.ReaderAt = sp.f
		if base {
			next = min(next, sp.keep)
			src = sp.base
		}
		buf := p[pos-off : next-off]
		n, err := src.ReadAt(buf, pos)
		if err != nil && err != io.EOF {
			return int(pos - off), fmt.Errorf("read spool at %d: %w", pos, err)
		}
		clear(buf[n:]) // past the end of what holds them: zeros
		pos = next
	}
	if n := int(end - off); n < len(p) {
		return n, io.EOF
	}
	return len(p), nil
}

// changes describes the spool's content as changes to base, for the
// commit.
func (sp *spool) changes() store.Changes {
	ch := store.Changes{Size: sp.size, Spool: sp.f}
	if sp.base != nil {
		ch.Keep = sp.keep
	}
	idx := make([]int64, 0, len(sp.cells))
	for i := range sp.cells {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		c := sp.cells[i]
		ch.Dirty = append(ch.Dirty, store.DirtyChunk{Index: i, Sum: c.sum, Summed: c.summed})
	}
	return ch
}
