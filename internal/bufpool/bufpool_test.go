package bufpool

import (
	"sync"
	"testing"
)

func TestClass(t *testing.T) {
	p := New(16<<10, 1<<20, 4<<20)
	for _, c := range []struct{ n, want int }{
		{0, 16 << 10}, {1, 16 << 10}, {16 << 10, 16 << 10}, {16<<10 + 1, 32 << 10},
		{100000, 128 << 10}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1},
	} {
		if got := p.Class(c.n); got != c.want {
			t.Errorf("Class(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// A buffer comes back zeroed, whatever was written into it, past its
// length too, and is reused rather than made again.
func TestReuseZeroes(t *testing.T) {
	p := New(16<<10, 1<<20, 4<<20)
	b := p.Get(100000)
	if len(b) != 100000 || cap(b) != 128<<10 {
		t.Fatalf("Get(100000): len %d cap %d", len(b), cap(b))
	}
	b = b[:cap(b)]
	for i := range b {
		b[i] = 0xA5
	}
	p.Put(b[:10])
	if p.Held() != 128<<10 {
		t.Fatalf("held %d after Put, want %d", p.Held(), 128<<10)
	}
	c := p.Get(70000)
	if &c[:1][0] != &b[0] {
		t.Fatal("the freed buffer of the class was not reused")
	}
	for i, v := range c[:cap(c)] {
		if v != 0 {
			t.Fatalf("byte %d of a reused buffer is %#x, want 0", i, v)
		}
	}
	if p.Held() != 0 {
		t.Fatalf("held %d after Get, want 0", p.Held())
	}
}

// The pool keeps no more than its bound, and leaves buffers that are not
// of a class to the garbage collector.
func TestBound(t *testing.T) {
	p := New(16<<10, 1<<20, 2<<20)
	for range 3 {
		p.Put(make([]byte, 1<<20))
	}
	if p.Held() != 2<<20 {
		t.Fatalf("held %d, want the bound %d", p.Held(), 2<<20)
	}
	q := New(16<<10, 1<<20, 2<<20)
	q.Put(make([]byte, 100000)) // not a power of two
	q.Put(make([]byte, 2<<20))  // past max
	q.Put(make([]byte, 8<<10))  // below min
	if q.Held() != 0 {
		t.Fatalf("held %d of buffers that are not classes", q.Held())
	}
	if b := q.Get(3 << 20); len(b) != 3<<20 || cap(b) != 3<<20 {
		t.Fatalf("Get past max: len %d cap %d", len(b), cap(b))
	}
}

func TestConcurrent(t *testing.T) {
	p := New(16<<10, 1<<20, 8<<20)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				b := p.Get((w*7919 + i*104729) % (1 << 20))
				for k := range b {
					if b[k] != 0 {
						t.Errorf("byte %d not zero", k)
						return
					}
				}
				if len(b) > 0 {
					b[len(b)-1] = byte(w + 1)
				}
				p.Put(b)
			}
		}()
	}
	wg.Wait()
	if h := p.Held(); h > 8<<20 {
		t.Fatalf("held %d past the bound", h)
	}
}
