package store

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestIdlePoolBounded: after more concurrent ingests than the idle pool
// holds, the pool keeps maxIdlePacks appenders (descriptors) and the rest
// are closed and unheld, found again through the index.
func TestIdlePoolBounded(t *testing.T) {
	s, _ := newTestStore(t)
	const n = 3 * maxIdlePacks
	var arrived sync.WaitGroup
	arrived.Add(n)
	s.beforeCommit = func() { arrived.Done(); arrived.Wait() } // all hold a pack at once
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := bytes.Repeat([]byte{byte(i)}, 3000) // one new chunk each
			if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), fmt.Sprint("f", i), PutOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	idle, held := len(s.idle), len(s.held)
	s.mu.Unlock()
	if idle > maxIdlePacks || held != idle {
		t.Fatalf("%d idle appenders, %d packs held, after %d concurrent ingests; want at most %d, all idle", idle, held, n, maxIdlePacks)
	}
	s.beforeCommit = nil
	// Released packs are appended to again.
	b := bytes.Repeat([]byte("x"), 3000)
	if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), "g", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
