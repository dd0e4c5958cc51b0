package fs

import (
	"fmt"
	"hash"
	"io"
	iofs "io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
)

// spool is a file being written: the changes to its committed version
// (base), until they are committed, in a spool file or, for a small file,
// in memory (see memspool.go). Opening a large file to change a few
// bytes must not copy it, and committing the change must not rehash it
// (store.CommitChanges), so the spool records only what was written, by
// cells of the store's chunk size C (cell i is [i·C, (i+1)·C)): a written
// cell is dirty and the spool file holds all of its bytes at their offset
// (the committed bytes of a cell that a write covers only in part are
// copied in first); every other cell reads from base below keep, and is
// zeros from keep on. The spool file is sparse and always as long as the
// file; a spool in memory holds the same bytes in mem, zeros past its
// end. Methods are called with the node's mu held, except the hasher's
// (see cell), which share only the cells' sums, under sumMu.
type spool struct {
	f *os.File // nil while the spool is in memory
	// mem holds the spool's bytes while it is in memory, from 0 (bytes
	// past it are zeros), within budget; dir is where a spill puts the
	// spool file (spill). memMu guards mem and f against the hasher.
	mem    []byte
	budget *memBudget
	dir    string
	memMu  sync.RWMutex
	size   int64
	dirty  bool // changed since the last commit
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
	// seq is how far the file was written in order from 0, with no
	// other write (a cp, a snapshot written whole); flushed is how much
	// of that the kernel was asked to write back (see writeAhead). A new
	// file's first write may skip a hole at its start, [0, hole), that
	// later writes fill without breaking the order: the engine writes a
	// snapshot's tensors first and its header last (mlx.Writer).
	seq, flushed, hole int64
	wroteAny           bool

	// hashq feeds the goroutines that hash cells while the file is
	// written (hashWorkers, started by the first); hashing counts the
	// cells queued and not yet hashed.
	hashq   chan hashJob
	hashing sync.WaitGroup
	sumMu   sync.Mutex // guards every cell's gen, sum and summed

	// whole, for a blob (a file in a blocks directory, named by the
	// sha256 of its whole content), is the sha256 of the cells hashed in
	// order from the start of the file, by a goroutine of its own beside
	// the cells' hasher (wholeq), and wholeCells are those cells as they
	// were hashed, so that its commit need not read and hash the file
	// whole (issue 9, "hash while writing": a 1 MiB block's commit spent
	// 1.1–1.4 ms of its fsync hashing it whole, then by cells). The
	// commit takes the hash only if none of those cells changed since
	// (wholeSum). Nil when not tracked; only the whole hasher touches
	// them until changes waits for it.
	whole      hash.Hash
	wholeq     chan hashJob
	wholeCells []hashJob
	whole0     *hashJob // the first cell, held back (queueHash)

	// pieces, for a new snapshot (.mlxkv), hashes the chunks its commit
	// will cut from its rows as they are written (see pieces.go); nil
	// when not tracked.
	pieces *pieceHasher

	// stored, when set, says whether the store holds a chunk: the
	// hashers then start the writeback of what they find new, and
	// nothing else (see writeAhead).
	stored func(blockstore.ID) bool
	// storedAll is stored of many chunks at once (Store.HasChunks).
	storedAll func([]blockstore.ID) []bool
	// ahead: the file is written in order from 0 and is large enough
	// for its writeback to start (writeAheadFrom); set by writeAhead,
	// read by the hashers.
	ahead atomic.Bool
	// async writes large appended writes into the spool file off the
	// request's path (asyncwrite.go); nil until the first.
	async atomic.Pointer[asyncWriter]
	// [allocFrom, allocEnd) of the spool file is allocated ahead of the
	// writes answered early (reserveAhead); noPrealloc: the filesystem
	// cannot.
	allocFrom, allocEnd int64
	noPrealloc          bool
	// allocStep is how far past a write the file is allocated
	// (preallocStep; tests on small filesystems set less).
	allocStep int64
	// sizeLimit is the daemon's file size limit (RLIMIT_FSIZE): no write
	// past it is answered early.
	sizeLimit int64
	// asyncMem is the daemon's budget of bytes answered early and not
	// landed yet (nil: unbounded).
	asyncMem *asyncBudget
}

// cell is a dirty cell. A write that reaches the end of a cell (the engine
// writes rows in order) queues it to be hashed from the spool file on
// another goroutine, beside the writer, so that its commit need not read
// and hash it; any later change of the cell drops the hash (gen counts
// them, so a hash of bytes that changed meanwhile is not kept).
type cell struct {
	gen    uint64
	sum    blockstore.ID
	summed bool
}

// hashJob asks for the hash of cell c, at off, as of its generation gen.
type hashJob struct {
	c   *cell
	gen uint64
	off int64
}

// hashQueue is how many cells may wait to be hashed; a cell that finds
// the queue full is left to the commit.
const hashQueue = 256

// hashWorkers is how many goroutines hash one file's cells, or pieces,
// as it is written: one writer of one file must be able to use many
// cores (issue 28: one hasher a file held a 4 GiB snapshot's write to
// one core, sha256 the most of it, on a 16-core host). Each hashes whole
// cells or pieces, independent of one another; up to 8, so that many
// files written at once do not each start a core's worth of goroutines
// more than there are cores.
func hashWorkers() int { return min(runtime.GOMAXPROCS(0), 8) }

// newSpool starts a spool over base (nil for an empty file): in memory
// when mem is set and base is small enough for it, else in a spool file
// in dir.
func newSpool(dir string, base *store.File, C int64, noHash bool, mem *memBudget) (*spool, error) {
	sp := &spool{C: C, base: base, cells: map[int64]*cell{}, noHash: noHash, dir: dir, allocStep: preallocStep, sizeLimit: fileSizeLimit()}
	if mem != nil && (base == nil || base.Size() <= mem.each) {
		sp.budget = mem
		if base != nil {
			sp.size, sp.keep = base.Size(), base.Size()
		}
		return sp, nil
	}
	f, err := os.CreateTemp(dir, "w-")
	if err != nil {
		return nil, fmt.Errorf("create spool: %w", err)
	}
	sp.f = f
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
	sp.asyncStop()
	sp.hashing.Wait()
	if sp.hashq != nil {
		close(sp.hashq)
	}
	if sp.wholeq != nil {
		close(sp.wholeq)
	}
	if sp.pieces != nil {
		sp.pieces.stop()
	}
	if sp.inMem() {
		sp.freeMem()
	} else if remove {
		// The name goes now; the file goes with its last descriptor,
		// closed off the caller's path: the kernel then drops its
		// pages, 4 GiB of them for a large snapshot whose stored bytes
		// never reached the disk (see hashedBy), which took the close
		// of such a file a noticeable part of its commit.
		os.Remove(sp.f.Name())
		go sp.f.Close()
	} else {
		sp.f.Close()
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
	if b := min(a+sp.C, sp.keep); a < b {
		if err := sp.copyIn(a, b); err != nil {
			return err
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
	fast := !sp.inMem() && sp.base == nil && off >= sp.size && (len(data) >= asyncMin || sp.asyncBusy()) && sp.reserveAhead(off, end) && sp.asyncMem.take(int64(len(data)))
	if !fast {
		if err := sp.landed(); err != nil {
			return 0, err
		}
	} else if a := sp.async.Load(); a != nil {
		a.mu.Lock()
		err := a.err
		a.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	first, last := off/sp.C, (end-1)/sp.C
	// Room for the write and the committed bytes it copies in (the cells
	// it covers in part, below keep), before anything changes.
	if err := sp.room(max(end, sp.size), max(end, min(sp.keep, (last+1)*sp.C))); err != nil {
		return 0, err
	}
	if end > sp.size {
		if err := sp.materializeEnd(); err != nil {
			return 0, err
		}
	}
	var covered []int64 // kept cells the write covers whole: not copied in
	var fresh []int64   // cells made dirty without copying anything in
	for i := first; i <= last; i++ {
		if sp.cells[i] != nil {
			continue
		}
		a, b := max(off, i*sp.C), min(end, i*sp.C+sp.C)
		if i*sp.C < sp.keep && (a > i*sp.C || b < min(i*sp.C+sp.C, sp.keep)) {
			if err := sp.materialize(i); err != nil {
				// The cells made dirty before it hold nothing yet.
				for _, k := range fresh {
					delete(sp.cells, k)
				}
				return 0, err
			}
		} else {
			sp.cells[i] = &cell{}
			fresh = append(fresh, i)
			if i*sp.C < sp.keep {
				covered = append(covered, i)
			}
		}
	}
	sp.sumMu.Lock()
	for i := first; i <= last; i++ {
		sp.cells[i].changed()
	}
	sp.sumMu.Unlock()
	var n int
	var err error
	if fast {
		sp.asyncWrite(data, off)
		n = len(data)
	} else {
		n, err = sp.writeData(data, off)
	}
	if n < len(data) {
		if len(covered) > 0 {
			n = sp.uncover(covered, off, n)
		}
		sp.unmark(fresh, off+int64(n))
	}
	if e := off + int64(n); e > sp.size {
		sp.size = e
	}
	sp.writeAhead(off, int64(n))
	if sp.pieces != nil {
		sp.pieces.wrote(data, off, int64(n), err)
	}
	if err == nil && !sp.noHash && !sp.piecesCover() {
		// Every cell whose end the write reached: in order, it is done.
		for i := first; (i+1)*sp.C <= end; i++ {
			sp.queueHash(i)
		}
	}
	return n, err
}

// uncover repairs the cells that a write meant to cover whole (covered,
// in order) when it wrote only n bytes at off (a full disk, an I/O
// error): their committed bytes were not copied in, so the bytes it did
// not write would read as the spool's holes, zeros, in place of the
// committed ones. A cell it did not reach reads from the committed
// version again; the cell where it stopped gets its committed tail copied
// in, or, if that fails too, reads from the committed version again and
// the write counts as ending at that cell's start (a shorter write, as
// POSIX allows). It returns the bytes written.
func (sp *spool) uncover(covered []int64, off int64, n int) int {
	w := off + int64(n)
	for _, i := range covered {
		a, b := i*sp.C, min(i*sp.C+sp.C, sp.keep)
		switch {
		case w >= b:
			continue // written whole
		case w <= a:
			delete(sp.cells, i)
		default:
			if err := sp.copyIn(w, b); err != nil {
				delete(sp.cells, i)
				w = a
			}
		}
	}
	return int(w - off)
}

// unmark takes back the cells that a write cut short made dirty (fresh)
// and did not reach: those that start at or after w, where it stopped.
// They hold nothing, and past the end of the file (a write that would
// have grown it) a dirty cell is one no commit accepts: the file could
// then never be committed again, and fsync and close failed even once
// the disk had room. Cells it reached in part stay dirty: their bytes
// from w on read as the spool's holes, zeros, as they did before (a
// covered cell, whose committed bytes they are not, uncover has dealt
// with already).
func (sp *spool) unmark(fresh []int64, w int64) {
	for _, i := range fresh {
		if i*sp.C >= w {
			delete(sp.cells, i)
		}
	}
}

// writeAt is f.WriteAt, except that a write that fails part way reports
// the bytes it wrote (os.File.WriteAt reports only those of the calls
// before the one that failed: a pwrite that wrote some and then hit a
// full disk counts as none, though its bytes are in the file).
func writeAt(f *os.File, b []byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, e := syscall.Pwrite(int(fd), b[n:], off+int64(n))
			if e == syscall.EINTR {
				continue
			}
			if m > 0 {
				n += m
			}
			if e != nil {
				werr = e
				break
			}
			if m == 0 {
				werr = io.ErrShortWrite
				break
			}
		}
		return true
	}); err != nil {
		return n, err
	}
	if werr != nil {
		return n, &iofs.PathError{Op: "write", Path: f.Name(), Err: werr}
	}
	return n, nil
}

// copyIn copies the committed bytes of [a, b) into the spool.
func (sp *spool) copyIn(a, b int64) error {
	if sp.base == nil {
		return nil
	}
	buf := make([]byte, b-a)
	if _, err := sp.base.ReadAt(buf, a); err != nil && err != io.EOF {
		return fmt.Errorf("read committed bytes at %d: %w", a, err)
	}
	if _, err := sp.writeData(buf, a); err != nil {
		return fmt.Errorf("copy committed bytes at %d to spool: %w", a, err)
	}
	return nil
}

// A large file written in order from its start (cp, a snapshot) is
// adopted as a pack at its commit (store/adopt.go), which fsyncs the
// spool: every byte of it goes to the disk then, after the commit has
// read and hashed the file, and the close waits for all of it. Asking
// the kernel to write back each writeAheadBytes of it as the writes come
// in overlaps that disk work with the writing and the hashing, so that
// the fsync finds little left to write (issue 9, "cp of a new 1 GiB
// snapshot"; the kernel would otherwise start only at its dirty
// threshold, 10% of memory). Random writes (a change to a large file)
// are left alone: most of such a spool may never reach the disk (a copied
// change, a spool dropped by a truncation).
const (
	writeAheadBytes = 8 << 20
	// writeAheadFrom is how much must have been written in order before
	// any is written back: smaller files are copied into shared packs, not
	// adopted (store.DefaultAdoptMinBytes).
	writeAheadFrom = store.DefaultAdoptMinBytes
)

// Bytes the store holds already are not written again: the commit only
// references their chunks, and the spool file that holds them is dropped
// (issue 28: a prefix-growth snapshot is 88% stored bytes, and writing
// them back doubled its write, the commit's fsync of its new chunks
// waiting behind 4 GiB of spool on the disk's queue). So where the
// spool's bytes are hashed as they are written (hashedBy), the hashers
// start the writeback of each cell or piece they find new (wroteNew),
// and writeAhead leaves the rest in memory; they reach the disk only if
// the kernel needs the memory, or the commit adopts the spool as a pack
// (most of it new). A cell or piece the queue had no room for is not
// written back early; its commit hashes it.

// hashedBy reports whether the hashers drive the writeback (see above):
// the store can say what it holds, and the file's writes are hashed as
// they come, by cell or by row piece.
func (sp *spool) hashedBy() bool {
	return sp.stored != nil && (!sp.noHash || sp.pieces != nil && sp.pieces.inOrder >= 0 && sp.pieces.p != nil)
}

// wroteNewPieces starts the writeback of the pieces whose sums the store
// does not hold, adjacent ones at once: wroteNew of many, in one read of
// the index for those not known to be stored (known: each is its
// parent's chunk). Called by the hashers.
func (sp *spool) wroteNewPieces(pieces []store.Piece, known []bool) {
	if !sp.ahead.Load() || len(pieces) == 0 {
		return
	}
	var ids []blockstore.ID
	for i, p := range pieces {
		if !known[i] {
			ids = append(ids, p.Sum)
		}
	}
	found := sp.storedAll(ids)
	stored := make([]bool, len(pieces))
	for i, k := 0, 0; i < len(pieces); i++ {
		if stored[i] = known[i]; !known[i] {
			stored[i], k = found[k], k+1
		}
	}
	sp.memMu.RLock()
	defer sp.memMu.RUnlock()
	if sp.f == nil {
		return
	}
	var off, n int64
	for i, p := range pieces {
		if stored[i] {
			continue
		}
		if n > 0 && p.Off != off+n {
			startWriteback(sp.f, off, n)
			n = 0
		}
		if n == 0 {
			off = p.Off
		}
		n += p.N
	}
	if n > 0 {
		startWriteback(sp.f, off, n)
	}
}

// wroteNew starts the writeback of [off, off+n), whose chunk sum the
// store does not hold. Called by the hashers.
func (sp *spool) wroteNew(off, n int64, sum blockstore.ID) {
	if !sp.ahead.Load() || sp.stored(sum) {
		return
	}
	sp.memMu.RLock()
	defer sp.memMu.RUnlock()
	if sp.f != nil {
		startWriteback(sp.f, off, n)
	}
}

// writeAhead records a write of n bytes at off and starts the writeback
// of what was written in order since the last one, once there is
// writeAheadBytes of it, unless the hashers do (hashedBy).
func (sp *spool) writeAhead(off, n int64) {
	if !sp.wroteAny && sp.base == nil && off > 0 {
		sp.seq, sp.hole = off, off
	}
	sp.wroteAny = true
	if sp.seq >= 0 && off+n <= sp.hole {
		return // into the hole at the start (the header), in order or not
	}
	if off != sp.seq || sp.seq < 0 {
		sp.seq = -1 // no longer in order
		sp.ahead.Store(false)
		return
	}
	sp.seq += n
	if sp.seq >= writeAheadFrom && !sp.inMem() {
		sp.ahead.Store(true)
	}
	if sp.hashedBy() {
		sp.flushed = sp.seq
		return
	}
	if sp.seq >= writeAheadFrom && sp.seq-sp.flushed >= writeAheadBytes && !sp.inMem() {
		startWriteback(sp.f, sp.flushed, sp.seq-sp.flushed)
		sp.flushed = sp.seq
	}
}

// changed drops the cell's hash. Called with sumMu held.
func (c *cell) changed() {
	c.gen++
	c.summed = false
}

// queueHash queues dirty cell i to be hashed, unless the queue is full.
func (sp *spool) queueHash(i int64) {
	if sp.hashq == nil {
		sp.hashq = make(chan hashJob, hashQueue)
		for range hashWorkers() {
			go sp.hasher(sp.hashq)
		}
	}
	c := sp.cells[i]
	sp.sumMu.Lock()
	j := hashJob{c: c, gen: c.gen, off: i * sp.C}
	sp.sumMu.Unlock()
	sp.hashing.Add(1)
	select {
	case sp.hashq <- j:
	default:
		sp.hashing.Done() // the commit will hash it
	}
	if sp.whole != nil {
		// The first cell waits for the second: a blob of one cell (the
		// engine's 64 KiB blocks) is named by that cell's sum (wholeSum),
		// and hashing it twice cost CPU the writers need.
		if i == 0 {
			sp.whole0 = &j
			return
		}
		if sp.whole0 != nil {
			sp.queueWhole(*sp.whole0)
			sp.whole0 = nil
		}
		sp.queueWhole(j)
	}
}

// hasher hashes queued cells from the spool. It reads the file while
// the writer may write the same cell: such a write changed the cell's
// generation before it began, so the hash is dropped.
func (sp *spool) hasher(q <-chan hashJob) {
	buf := make([]byte, sp.C)
	for j := range q {
		sp.hashCell(j, buf)
		sp.hashing.Done()
	}
}

// hashCell hashes a queued cell, keeping the sum if the cell did not
// change since it was queued.
func (sp *spool) hashCell(j hashJob, buf []byte) {
	if !sp.readRange(buf, j.off) {
		return
	}
	sum := blockstore.Sum(buf)
	sp.sumMu.Lock()
	kept := j.c.gen == j.gen
	if kept {
		j.c.sum, j.c.summed = sum, true
	}
	sp.sumMu.Unlock()
	if kept && sp.stored != nil {
		sp.wroteNew(j.off, sp.C, sum)
	}
}

// readRange reads the spool's bytes at off into buf, from another
// goroutine than the writer's (a hasher), as of now. It reports whether
// it read all of them; bytes past the end of a spool in memory are not
// read.
func (sp *spool) readRange(buf []byte, off int64) bool {
	if sp.landed() != nil {
		return false
	}
	sp.memMu.RLock()
	f, n := sp.f, 0
	if f == nil && off+int64(len(buf)) <= int64(len(sp.mem)) {
		n = copy(buf, sp.mem[off:]) // copied out: a write may come
	}
	sp.memMu.RUnlock()
	if f != nil {
		n, _ = f.ReadAt(buf, off)
	}
	return n == len(buf)
}

// truncate sets the file's size.
func (sp *spool) truncate(size int64) error {
	if err := sp.landed(); err != nil {
		return err
	}
	// Room for the new size, and for the committed bytes copied in: of
	// the cell a shorter size cuts, or of the last cell when the file
	// grows (materializeEnd). What a longer size adds is zeros.
	need := min(sp.keep, (size/sp.C+1)*sp.C)
	if size > sp.size {
		need = min(sp.keep, (sp.size/sp.C+1)*sp.C)
	}
	if err := sp.room(size, need); err != nil {
		return err
	}
	switch {
	case size < sp.size:
		if k := size / sp.C; size%sp.C != 0 {
			if sp.cells[k] == nil && k*sp.C < sp.keep {
				if err := sp.materialize(k); err != nil {
					return err
				}
			}
			if c := sp.cells[k]; c != nil {
				sp.sumMu.Lock()
				c.changed() // a shorter cell
				sp.sumMu.Unlock()
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
	if sp.pieces != nil {
		sp.pieces.truncated(size)
	}
	if sp.inMem() {
		sp.truncMem(size)
	} else if err := sp.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate spool %s: %w", sp.f.Name(), err)
	} else {
		// The truncation freed the blocks allocated past size.
		sp.allocEnd = min(sp.allocEnd, size)
		sp.allocFrom = min(sp.allocFrom, sp.allocEnd)
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
	if err := sp.landed(); err != nil {
		return 0, err
	}
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
		if sp.inMem() {
			src = memBytes(sp.mem)
		}
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
	sp.landed()       // its error fails the commit first (commitLocked)
	sp.hashing.Wait() // hashes in flight are nearly done: wait, not redo
	ch := store.Changes{Size: sp.size, Spool: sp.f}
	if sp.inMem() {
		ch.Mem = sp.mem
	}
	if sp.base != nil {
		ch.Keep = sp.keep
	}
	idx := make([]int64, 0, len(sp.cells))
	for i := range sp.cells {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	sp.sumMu.Lock()
	for _, i := range idx {
		c := sp.cells[i]
		ch.Dirty = append(ch.Dirty, store.DirtyChunk{Index: i, Sum: c.sum, Summed: c.summed})
	}
	sp.sumMu.Unlock()
	ch.BlobSum, ch.BlobSummed = sp.wholeSum()
	if sp.pieces != nil && sp.keep == 0 {
		ch.Pieces = sp.pieces.sums()
	}
	return ch
}
