package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfs/kvfs/mlx"
)

// TestPrefixCache: concurrent requests for one view make it once; a view
// of a newer version of the same file drops the older version's views,
// not other files'.
func TestPrefixCache(t *testing.T) {
	var c prefixCache
	var builds atomic.Int32
	build := func() (*mlx.PrefixView, error) {
		builds.Add(1)
		time.Sleep(10 * time.Millisecond)
		return &mlx.PrefixView{}, nil
	}
	ctx := context.Background()
	old := prefixKey{ino: 10, manifest: "a", dir: 1, n: 5}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.do(ctx, old, 7, build); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("8 concurrent requests made the view %d times", n)
	}
	other := prefixKey{ino: 20, manifest: "c", dir: 1, n: 5}
	c.do(ctx, other, 8, build)
	c.do(ctx, prefixKey{ino: 10, manifest: "a", dir: 1, n: 6}, 7, build)
	c.do(ctx, prefixKey{ino: 11, manifest: "b", dir: 1, n: 5}, 7, build)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.views[old]; ok {
		t.Error("a view of the file's old version is still kept")
	}
	if _, ok := c.views[other]; !ok {
		t.Error("another file's view was dropped")
	}
	if len(c.views) != 2 || len(c.order) != 2 {
		t.Errorf("%d views, %d in order; want 2", len(c.views), len(c.order))
	}
}
