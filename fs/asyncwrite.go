package fs

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Answering a large write before its bytes reach the spool file: the
// write's bytes are copied into a buffer and written into the spool by a
// goroutine of the spool's own, in order, so that the next WRITE request
// is read while this one's bytes go into the page cache (issue 28: the
// spool's pwrite was a third of each 1 MiB WRITE's time on the H200 host).
// Only appended writes to a new file's spool are answered early, and only
// into space allocated ahead (reserveAhead): a full disk then cuts a write
// short before it is answered, as before, and what can still fail in the
// background is an I/O error. Whatever reads the spool file (the hashers,
// readers, the commit) or writes it any other way waits for the writes
// queued before it (landed). A write that fails there is an error of the
// spool from then on: every later write, read, fsync and close fails with
// it, and no commit of the spool happens, so no reader is ever served the
// bytes that did not land.
type asyncWriter struct {
	q         chan asyncJob
	sub, land atomic.Int64
	mu        sync.Mutex
	cond      *sync.Cond
	err       error
	bufs      *sync.Pool
	done      chan struct{}
	// write writes a buffer into the spool file (writeAt; tests fail it).
	write func(f *os.File, b []byte, off int64) (int, error)
}

type asyncJob struct {
	buf []byte
	off int64
}

// asyncQueue bounds the writes in flight for one file (their buffers).
const asyncQueue = 16

// asyncTotal bounds the bytes answered early and not landed yet across
// the daemon's files: each such write holds its bytes in a buffer until it
// lands, and a hundred writers at once would otherwise hold 1.6 GiB. A
// write that finds no room lands before it is answered.
const asyncTotal = 256 << 20

// asyncBudget is what is left of asyncTotal (nil: no bound, for tests).
type asyncBudget struct{ left atomic.Int64 }

func newAsyncBudget(n int64) *asyncBudget {
	b := &asyncBudget{}
	b.left.Store(n)
	return b
}

// take reserves n bytes of the budget, if there is room.
func (b *asyncBudget) take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		l := b.left.Load()
		if l < n {
			return false
		}
		if b.left.CompareAndSwap(l, l-n) {
			return true
		}
	}
}

// give returns n bytes taken.
func (b *asyncBudget) give(n int64) {
	if b != nil {
		b.left.Add(n)
	}
}

// asyncMin is the smallest write answered before it lands.
const asyncMin = 64 << 10

var asyncBufs = sync.Pool{New: func() any { b := make([]byte, requestBytes); return &b }}

func (sp *spool) asyncStart() {
	a := &asyncWriter{q: make(chan asyncJob, asyncQueue), bufs: &asyncBufs, done: make(chan struct{}), write: writeAt}
	a.cond = sync.NewCond(&a.mu)
	sp.async.Store(a)
	go sp.asyncRun(a)
}

func (sp *spool) asyncRun(a *asyncWriter) {
	defer close(a.done)
	for j := range a.q {
		a.mu.Lock()
		failed := a.err != nil
		a.mu.Unlock()
		if !failed {
			if _, err := a.write(sp.f, j.buf, j.off); err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
		}
		sp.asyncMem.give(int64(len(j.buf)))
		if b := j.buf[:cap(j.buf)]; len(b) == requestBytes {
			a.bufs.Put(&b)
		}
		a.mu.Lock()
		a.land.Add(1)
		a.cond.Broadcast()
		a.mu.Unlock()
	}
}

// asyncWrite queues data at off; the spool's metadata is the caller's.
func (sp *spool) asyncWrite(data []byte, off int64) {
	if sp.async.Load() == nil {
		sp.asyncStart()
	}
	a := sp.async.Load()
	var b []byte
	if len(data) >= asyncMin {
		b = *asyncBufs.Get().(*[]byte)
	}
	if cap(b) < len(data) {
		b = make([]byte, len(data))
	}
	b = b[:len(data)]
	copy(b, data)
	a.sub.Add(1)
	a.q <- asyncJob{buf: b, off: off}
}

// asyncBusy reports whether writes answered early are still landing: a
// small appended write then joins their queue rather than wait for them
// (a direct write from an unaligned buffer reaches the daemon as a large
// request and a small one).
func (sp *spool) asyncBusy() bool {
	a := sp.async.Load()
	return a != nil && a.sub.Load() > a.land.Load()
}

// landed waits for the writes queued so far and returns their error.
func (sp *spool) landed() error {
	a := sp.async.Load()
	if a == nil {
		return nil
	}
	target := a.sub.Load()
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.land.Load() < target {
		a.cond.Wait()
	}
	return a.err
}

// asyncStop waits for the queue and ends its goroutine.
func (sp *spool) asyncStop() {
	a := sp.async.Load()
	if a == nil {
		return
	}
	sp.landed()
	close(a.q)
	<-a.done
}

// preallocStep is how far past a write the spool file is allocated when
// the write is answered early: one fallocate for every 64 writes of 1 MiB.
const preallocStep = 64 << 20

// reserveAhead reports whether [off, end) of the spool file is allocated,
// allocating it (and allocStep past it) if not. Only such a write is
// answered before it lands: a write into allocated space cannot fail for
// want of space, so a full disk still cuts a write short before it is
// answered (spool.write's contract), never after, when no writer could
// learn of it. Where the filesystem cannot allocate ahead, writes land
// before they are answered.
func (sp *spool) reserveAhead(off, end int64) bool {
	if sp.noPrealloc {
		return false
	}
	if end > sp.sizeLimit {
		// Past the daemon's file size limit (RLIMIT_FSIZE), which an
		// allocation that keeps the size does not check: the write would
		// fail with EFBIG after it was answered. It lands first, and is
		// cut short there.
		return false
	}
	if off >= sp.allocFrom && end <= sp.allocEnd {
		return true
	}
	from, contiguous := off, off >= sp.allocFrom && off <= sp.allocEnd
	if contiguous {
		from = sp.allocEnd
	}
	to := end + sp.allocStep
	if err := allocateAhead(sp.f, from, to-from); err != nil {
		if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
			sp.noPrealloc = true // unsupported: do not ask again
		}
		// A failed allocation may have allocated part of the range (ext4
		// keeps what it got before it ran out): give it back, so that a
		// nearly full disk keeps its room for the writes that land before
		// they are answered, and no pack keeps it if the spool becomes one.
		sp.allocEnd = max(sp.allocEnd, to)
		sp.dropAhead()
		return false
	}
	if !contiguous {
		sp.allocFrom = off
	}
	sp.allocEnd = to
	return true
}

// dropAhead frees what reserveAhead allocated past the end of the file,
// once the writes queued have landed: before a commit (which may adopt
// the spool file as a pack), after a failed allocation. A failure leaves
// the blocks to the spool file's removal.
func (sp *spool) dropAhead() {
	if sp.allocEnd <= sp.size || sp.f == nil {
		return
	}
	if sp.landed() == nil && sp.f.Truncate(sp.size) == nil {
		sp.allocEnd = min(sp.allocEnd, sp.size)
		sp.allocFrom = min(sp.allocFrom, sp.allocEnd)
	}
}
