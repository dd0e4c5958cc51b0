package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfs/kvfs/mlx"
)

// TestViewCacheShares: concurrent requests for one view share one
// resolution, "shown as it is" (nil) is kept like a view, failures are
// not kept, and a waiter whose context ends stops waiting.
func TestViewCacheShares(t *testing.T) {
	var c viewCache
	var calls atomic.Int32
	release := make(chan struct{})
	resolve := func() (*mlx.WholeView, error) {
		calls.Add(1)
		<-release
		return nil, nil
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, _, err := c.do(context.Background(), "a", resolve); v != nil || err != nil {
				t.Errorf("do: %v, %v", v, err)
			}
		}()
	}
	// A waiter that gives up.
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, hit, err := c.do(ctx, "a", resolve); !hit || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: hit %v, %v", hit, err)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if _, hit, _ := c.do(context.Background(), "a", resolve); !hit || calls.Load() != 1 {
		t.Fatalf("%d resolutions for 10 requests, hit %v; want 1", calls.Load(), hit)
	}
	fail := func() (*mlx.WholeView, error) { calls.Add(1); return nil, errors.New("blocks missing") }
	for i := 0; i < 2; i++ {
		if _, _, err := c.do(context.Background(), "b", fail); err == nil {
			t.Fatal("failure not reported")
		}
	}
	if calls.Load() != 3 {
		t.Fatalf("a failure was kept: %d resolutions", calls.Load())
	}
}

// TestViewCacheBounded: the cache keeps at most viewCacheSize views, and
// no more than viewCacheBytes beyond the newest.
func TestViewCacheBounded(t *testing.T) {
	var c viewCache
	for i := 0; i < 3*viewCacheSize; i++ {
		c.do(context.Background(), fmt.Sprint(i), func() (*mlx.WholeView, error) { return nil, nil })
	}
	if len(c.views) != viewCacheSize || len(c.order) != viewCacheSize {
		t.Fatalf("%d views kept", len(c.views))
	}
	big := func() (*mlx.WholeView, error) { return &mlx.WholeView{Prefix: make([]byte, viewCacheBytes/3)}, nil }
	for i := 0; i < 4; i++ {
		c.do(context.Background(), fmt.Sprint("big", i), big)
	}
	if c.bytes > viewCacheBytes {
		t.Fatalf("%d bytes kept, over %d", c.bytes, viewCacheBytes)
	}
	if _, ok := c.views["big3"]; !ok {
		t.Fatal("the newest view was dropped")
	}
}

// TestViewCacheResolvesFew: however many different views are asked for at
// once, at most maxResolving are resolved at a time (each can hold a
// hundred megabytes while it is); a caller that gives up while waiting
// for its turn gets its context's error and leaves nothing behind.
func TestViewCacheResolvesFew(t *testing.T) {
	var c viewCache
	var now, peak atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := c.do(context.Background(), fmt.Sprint("view-", i), func() (*mlx.WholeView, error) {
				n := now.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				<-release
				now.Add(-1)
				return nil, nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.do(ctx, "given-up", func() (*mlx.WholeView, error) { return nil, nil }); err == nil {
		t.Error("a caller whose context ended while waiting to resolve got no error")
	}
	close(release)
	wg.Wait()
	if p := peak.Load(); p > maxResolving || p == 0 {
		t.Fatalf("%d resolutions at once, want at most %d", p, maxResolving)
	}
	c.mu.Lock()
	_, left := c.views["given-up"]
	c.mu.Unlock()
	if left {
		t.Fatal("the abandoned resolution stayed in the cache")
	}
}
