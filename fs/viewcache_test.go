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
