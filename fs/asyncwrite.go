package fs

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Answering a large write before its bytes reach the spool file: the
// write's bytes are copied into a buffer and written into the spool by a
// goroutine of the spool's own, in order, so that the next WRITE request
// is read while this one's bytes go into the page cache (issue 28: the
// spool's pwrite was a third of each 1 MiB WRITE's time on the H200 host).
// Whatever reads the spool file (the hashers, readers, the commit) or
// writes it any other way waits for the writes queued before it
// (landedAll, drain). A write that fails there is an error of the spool
// from then on: every later write, fsync and close fails with it, and no
// commit of the spool happens, so no reader is ever served the bytes that
// did not land.
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
		b := j.buf[:cap(j.buf)]
		a.bufs.Put(&b)
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
	bp := asyncBufs.Get().(*[]byte)
	b := *bp
	if cap(b) < len(data) {
		b = make([]byte, len(data))
	}
	b = b[:len(data)]
	copy(b, data)
	a.sub.Add(1)
	a.q <- asyncJob{buf: b, off: off}
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

// asyncRoomBytes is the free space the spool's filesystem must have, past
// the writes in flight, for a write to be answered before it lands: near
// a full disk writes land before they are answered, so that one the disk
// cannot take is cut short and says so itself (spool.write's contract).
const asyncRoomBytes = 1 << 30

// asyncRoom reports whether the spool's filesystem has room to answer
// writes early, checked at most every 100 ms.
func (sp *spool) asyncRoom() bool {
	now := time.Now()
	if now.Sub(sp.roomAt) < 100*time.Millisecond {
		return sp.roomy
	}
	var st syscall.Statfs_t
	sp.roomy = syscall.Statfs(sp.dir, &st) == nil && int64(st.Bavail)*int64(st.Bsize) > asyncRoomBytes
	sp.roomAt = now
	return sp.roomy
}
