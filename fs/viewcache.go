package fs

import (
	"context"
	"sync"

	"github.com/kvfs/kvfs/mlx"
)

// viewCache keeps resolved snapshots by manifest ID: committed content
// never changes, so a view stays valid for as long as it is kept. It keeps
// the answer "shown as it is" (a nil view: a whole-layout snapshot, one
// that does not parse) too, since finding that out parses the header: a
// snapshot with a long token list once cost a parse of seconds and of
// gigabytes per stat. Requests for a view being resolved wait for that one
// resolution instead of starting their own. Failures are not kept (blocks
// may appear later).
type viewCache struct {
	mu    sync.Mutex
	views map[string]*viewEntry // resolved and in flight
	order []string              // resolved, oldest first
	bytes int64                 // viewBytes of the resolved ones
}

// viewEntry is one view, resolved once done is closed.
type viewEntry struct {
	done chan struct{}
	v    *mlx.WholeView
	err  error
}

// The cache keeps at most viewCacheSize views and, beyond the newest one,
// viewCacheBytes of their estimated memory.
const (
	viewCacheSize  = 64
	viewCacheBytes = 256 << 20
)

// viewBytes estimates the memory a view holds: its prefix, and the parsed
// header beside it (tokens, block lists), about as large again.
func viewBytes(v *mlx.WholeView) int64 {
	if v == nil {
		return 0
	}
	return 2*int64(len(v.Prefix)) + 1024
}

// do returns the view of manifest id, resolving it with resolve unless it
// is cached or being resolved; hit says whether it was found (cached or in
// flight). A caller whose ctx ends stops waiting; the resolution goes on.
func (c *viewCache) do(ctx context.Context, id string, resolve func() (*mlx.WholeView, error)) (v *mlx.WholeView, hit bool, err error) {
	c.mu.Lock()
	if c.views == nil {
		c.views = map[string]*viewEntry{}
	}
	if e, ok := c.views[id]; ok {
		c.mu.Unlock()
		select {
		case <-e.done:
			return e.v, true, e.err
		case <-ctx.Done():
			return nil, true, ctx.Err()
		}
	}
	e := &viewEntry{done: make(chan struct{})}
	c.views[id] = e
	c.mu.Unlock()

	e.v, e.err = resolve()
	close(e.done)

	c.mu.Lock()
	defer c.mu.Unlock()
	if e.err != nil {
		delete(c.views, id)
		return nil, false, e.err
	}
	c.order = append(c.order, id)
	c.bytes += viewBytes(e.v)
	for len(c.order) > 1 && (len(c.order) > viewCacheSize || c.bytes > viewCacheBytes) {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= viewBytes(c.views[old].v)
		delete(c.views, old)
	}
	return e.v, false, nil
}
