// Package bufpool keeps large byte buffers for reuse.
//
// In the VMs kvfs is measured on, a fresh page costs 12–18 µs to fault
// in (docs/DESIGN.md, "Performance notes"), and the Go runtime gives freed heap
// back to the system between one small file and the next: a 1 MiB buffer
// made per commit cost 3–4 ms of page faults, more than the commit's
// fdatasync. A Pool hands out buffers whose capacities are powers of two,
// so that a freed buffer fits any later request of its class, and keeps at
// most a bounded number of bytes of them.
package bufpool

import (
	"math/bits"
	"sync"
)

// Pool keeps freed buffers of capacities min, 2·min, ... up to max (powers
// of two), at most keep bytes in all. It is safe for concurrent use.
type Pool struct {
	min, max int
	keep     int
	mu       sync.Mutex
	held     int
	free     [][][]byte // by class: free[k] holds buffers of capacity min<<k
}

// New returns a pool of buffers from min to max bytes (both powers of
// two, min ≤ max) that keeps at most keep bytes of freed ones.
func New(min, max, keep int) *Pool {
	if min <= 0 || min&(min-1) != 0 || max < min || max&(max-1) != 0 {
		panic("bufpool: min and max must be powers of two, min ≤ max")
	}
	return &Pool{min: min, max: max, keep: keep, free: make([][][]byte, bits.Len(uint(max/min)))}
}

// Class is the capacity a request for n bytes gets: the least power of two
// from min that holds n, or n itself past max (such buffers are not kept).
func (p *Pool) Class(n int) int {
	if n > p.max {
		return n
	}
	c := p.min
	for c < n {
		c <<= 1
	}
	return c
}

// Get returns a buffer of length n with capacity Class(n), all zeros up
// to its capacity.
func (p *Pool) Get(n int) []byte {
	b, reused := p.take(n)
	if reused {
		clear(b[:cap(b)])
	}
	return b
}

// Scratch is Get for a caller that writes every byte it reads: the bytes
// of a reused buffer are left as they were.
func (p *Pool) Scratch(n int) []byte {
	b, _ := p.take(n)
	return b
}

// take returns a kept buffer of n's class, or a new one (zeros).
func (p *Pool) take(n int) (b []byte, reused bool) {
	c := p.Class(n)
	if k, ok := p.class(c); ok {
		p.mu.Lock()
		if l := len(p.free[k]); l > 0 {
			b := p.free[k][l-1]
			p.free[k][l-1] = nil
			p.free[k] = p.free[k][:l-1]
			p.held -= c
			p.mu.Unlock()
			return b[:n], true
		}
		p.mu.Unlock()
	}
	return make([]byte, n, c), false
}

// Put gives back a buffer that nothing uses any more (one from Get, or any
// buffer whose capacity is a class). A buffer of another capacity, or one
// past the bound, is left to the garbage collector.
func (p *Pool) Put(b []byte) {
	c := cap(b)
	k, ok := p.class(c)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held+c > p.keep {
		return
	}
	p.held += c
	p.free[k] = append(p.free[k], b[:c])
}

// Held is how many bytes of freed buffers the pool keeps.
func (p *Pool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// class returns the index of capacity c, if c is a class.
func (p *Pool) class(c int) (int, bool) {
	if c < p.min || c > p.max || c&(c-1) != 0 {
		return 0, false
	}
	return bits.Len(uint(c/p.min)) - 1, true
}
