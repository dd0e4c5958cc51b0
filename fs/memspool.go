package fs

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/kvfs/kvfs/internal/bufpool"
)

// A small file's spool is held in memory. A durable small file (the
// engine's blocks protocol: create, write 64 KiB, fsync, close, rename)
// paid, in the daemon, for a spool file of its own: its creation, the
// write, the hasher's read back, its unlink and close, then the commit's
// copy_file_range of the bytes into a shared pack and a read of them back
// from the pack for the journal's data record (issue 9, "Writes: where it
// ends"). A spool in memory needs none of those: the writes copy into a
// buffer, the hasher hashes from it, and the commit writes the pack and
// the journal record from it (store.Changes.Mem). A spool stays in memory
// while the file is at most memSpoolMax bytes long, the bound of the
// journal's inline commits (store option inline.max, 1 MiB by default):
// a file the journal carries anyway. A write or truncation past it, or a
// buffer that would take the daemon past memSpoolTotal, spills the spool
// to a spool file first (spill), with every byte in place, and the file
// goes on as any file spool: large files are adopted as packs from their
// spool file and written back as they come, as before.

const (
	memSpoolMax = 1 << 20
	// memSpoolTotal bounds the buffers of every spool held in memory, so
	// that many open writers cannot exhaust the daemon's memory: beyond it
	// a spool that needs to grow spills to a file, and a new one starts
	// in a file if it cannot grow.
	memSpoolTotal = 64 << 20
	// memSpoolMin is the least a buffer grows by.
	memSpoolMin = 16 << 10
	// memSpoolKeep is how many bytes of buffers that spools are done with
	// are kept for the next ones (bufpool: in these VMs the fresh pages of
	// a new 1 MiB buffer cost more to fault in than the commit's sync).
	memSpoolKeep = 16 << 20
)

// memBudget is what spools may hold in memory: each at most each bytes,
// all together at most max. Buffers count by capacity; bufs keeps those
// that spools are done with, which count no more.
type memBudget struct {
	each, max int64
	used      atomic.Int64
	bufs      *bufpool.Pool
}

func newMemBudget(each, max int64) *memBudget {
	return &memBudget{each: each, max: max, bufs: bufpool.New(memSpoolMin, memSpoolMax, memSpoolKeep)}
}

// capacity is the capacity of a buffer that holds n bytes: the pool's
// class for n, within each.
func (b *memBudget) capacity(n int64) int64 { return min(int64(b.bufs.Class(int(n))), b.each) }

// alloc returns a buffer of capacity n (from capacity), all zeros: from
// the pool when n is one of its classes.
func (b *memBudget) alloc(n int64) []byte {
	if int64(b.bufs.Class(int(n))) == n {
		return b.bufs.Get(int(n))
	}
	return make([]byte, n)
}

// take reserves n bytes, if they fit.
func (b *memBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give returns n bytes.
func (b *memBudget) give(n int64) { b.used.Add(-n) }

// memBytes reads a spool's buffer: zeros past its end (the rest of the
// file reads as the holes of a sparse spool file do).
type memBytes []byte

func (m memBytes) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	if off < int64(len(m)) {
		n = copy(p, m[off:])
	}
	clear(p[n:])
	return len(p), nil
}

// inMem reports whether the spool is held in memory.
func (sp *spool) inMem() bool { return sp.f == nil }

// growMem makes the buffer hold [0, end), with zeros where nothing was
// written, if the file stays within the bound of a spool in memory and
// the daemon's budget allows. Bytes of the buffer past its length are
// always zeros (truncate clears them). Called in memory only.
func (sp *spool) growMem(end int64) bool {
	if end <= int64(len(sp.mem)) {
		return true
	}
	if end > sp.budget.each {
		return false
	}
	sp.memMu.Lock()
	defer sp.memMu.Unlock()
	if c := int64(cap(sp.mem)); end > c {
		n := sp.budget.capacity(max(end, 2*c))
		if !sp.budget.take(n - c) {
			return false
		}
		buf := sp.budget.alloc(n)[:len(sp.mem)]
		copy(buf, sp.mem)
		sp.budget.bufs.Put(sp.mem)
		sp.mem = buf
	}
	sp.mem = sp.mem[:end]
	return true
}

// room makes sure the spool can take a file of size bytes whose bytes
// below need are to be written: in memory if size is within the bound
// and the buffer can grow to need (the bytes between need and size are
// zeros, and take no memory), else in its spool file (spilled now, before
// any change, so that a full disk fails the write or truncation with
// nothing done).
func (sp *spool) room(size, need int64) error {
	if !sp.inMem() || size <= sp.budget.each && sp.growMem(need) {
		return nil
	}
	return sp.spill()
}

// spill moves the spool from memory into a new spool file, every byte at
// its offset; the file is as long as the file being written. On failure
// (a full disk) the spool stays in memory, unchanged.
func (sp *spool) spill() error {
	f, err := os.CreateTemp(sp.dir, "w-")
	if err != nil {
		return fmt.Errorf("create spool: %w", err)
	}
	_, err = writeAt(f, sp.mem, 0)
	if err == nil {
		if err = f.Truncate(sp.size); err != nil {
			err = fmt.Errorf("size spool %s: %w", f.Name(), err)
		}
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("spill spool to a file: %w", err)
	}
	sp.memMu.Lock()
	old := sp.mem
	sp.f, sp.mem = f, nil
	sp.memMu.Unlock()
	sp.budget.give(int64(cap(old)))
	sp.budget.bufs.Put(old)
	return nil
}

// writeData writes b at off: into the buffer while the spool is in
// memory (growing it; room made it large enough, else it spills first),
// else into the spool file.
func (sp *spool) writeData(b []byte, off int64) (int, error) {
	if sp.inMem() {
		if sp.growMem(off + int64(len(b))) {
			sp.memMu.Lock()
			copy(sp.mem[off:], b)
			sp.memMu.Unlock()
			return len(b), nil
		}
		if err := sp.spill(); err != nil {
			return 0, err
		}
	}
	return writeAt(sp.f, b, off)
}

// truncMem cuts the buffer to size, clearing what was past it (a file
// that grows again reads zeros there).
func (sp *spool) truncMem(size int64) {
	if size >= int64(len(sp.mem)) {
		return
	}
	sp.memMu.Lock()
	clear(sp.mem[size:])
	sp.mem = sp.mem[:size]
	sp.memMu.Unlock()
}

// freeMem drops the buffer, for a later spool to reuse. The hasher is
// done, and nothing else holds the buffer: reads copy out of it, and a
// commit from it (store.Changes.Mem) keeps none of it once it returns.
func (sp *spool) freeMem() {
	if sp.budget != nil {
		sp.budget.give(int64(cap(sp.mem)))
		sp.budget.bufs.Put(sp.mem)
	}
	sp.mem = nil
}
