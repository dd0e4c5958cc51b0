package fs

import (
	"crypto/sha256"
	"encoding"
	"io"

	"github.com/kvfs/kvfs/blockstore"
)

// A blob (a file in a blocks directory) is named by the sha256 of its
// whole content. Its spool hashes that content as it is written, in order
// from the start of the file, on a goroutine beside the cells' hasher
// (spool.whole, queued by queueHash), so that its commit takes the sum
// (store.Changes.BlobSum) instead of reading and hashing the file.

// queueWhole queues cell job j to the whole hash, unless the queue is full.
func (sp *spool) queueWhole(j hashJob) {
	if sp.wholeq == nil {
		sp.wholeq = make(chan hashJob, hashQueue)
		go sp.wholeHasher(sp.wholeq)
	}
	sp.hashing.Add(1)
	select {
	case sp.wholeq <- j:
	default:
		sp.hashing.Done() // the commit will hash from here
	}
}

// wholeHasher adds the cells queued in order from the start of the file
// to the whole hash (whole).
func (sp *spool) wholeHasher(q <-chan hashJob) {
	buf := make([]byte, sp.C)
	for j := range q {
		sp.hashWhole(j, buf)
		sp.hashing.Done()
	}
}

// hashWhole adds a queued cell to the whole hash if it is the next one
// and did not change since it was queued: buf then holds its bytes as of
// its generation, and a later change of the cell changes its generation,
// which wholeSum sees.
func (sp *spool) hashWhole(j hashJob, buf []byte) {
	if j.off != int64(len(sp.wholeCells))*sp.C || !sp.readRange(buf, j.off) {
		return
	}
	sp.sumMu.Lock()
	same := j.c.gen == j.gen
	sp.sumMu.Unlock()
	if same {
		sp.whole.Write(buf)
		sp.wholeCells = append(sp.wholeCells, j)
	}
}

// trackWhole makes the spool of a new blob hash its whole content as it
// is written in order. Called before the first write.
func (sp *spool) trackWhole() {
	sp.whole = sha256.New()
}

// wholeSum returns the sha256 of the whole content: the cells hashed in
// order while the file was written, if none changed since, then the bytes
// after them, read from the spool; or, if one did, all of the content,
// read from the spool (the commit can then still take the sums of the
// cells). Nothing of base may be kept (a blob opened with O_TRUNC, or
// new). Called after the hashers are done (changes).
func (sp *spool) wholeSum() (blockstore.ID, bool) {
	if sp.whole == nil || sp.keep != 0 {
		return blockstore.ID{}, false
	}
	if sp.size == sp.C {
		sp.sumMu.Lock()
		c := sp.cells[0]
		one := c != nil && c.summed
		sp.sumMu.Unlock()
		if one { // the sum of the bytes it holds now
			return c.sum, true
		}
	}
	w := int64(len(sp.wholeCells))
	valid := w*sp.C <= sp.size
	sp.sumMu.Lock()
	for k, j := range sp.wholeCells {
		if !valid {
			break
		}
		// The same cell (not one made again after a truncation), not
		// changed since.
		c := sp.cells[int64(k)]
		valid = c == j.c && c.gen == j.gen
	}
	sp.sumMu.Unlock()
	if !valid {
		sp.whole.Reset()
		sp.wholeCells = sp.wholeCells[:0]
		w = 0
	}
	// A copy of the hash: the file may be written further after this
	// commit, and the hasher goes on from the state it had.
	state, err := sp.whole.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return blockstore.ID{}, false
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return blockstore.ID{}, false
	}
	if rest := sp.size - w*sp.C; rest > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(sp, w*sp.C, rest)); err != nil {
			return blockstore.ID{}, false // the commit reads it, and reports
		}
	}
	var id blockstore.ID
	copy(id[:], h.Sum(nil))
	return id, true
}
