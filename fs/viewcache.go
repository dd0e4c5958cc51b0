package fs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// viewCache keeps resolved snapshots by manifest ID: committed content
// never changes, so a view stays valid for as long as it is kept. It keeps
// the answer "shown as it is" (a nil view: a whole-layout snapshot, one
// that does not parse) too, since finding that out parses the header: a
// snapshot with a long token list once cost a parse of seconds and of
// gigabytes per stat. Requests for a view being resolved wait for that one
// resolution instead of starting their own. Failures are not kept as
// views (blocks may appear later), but a broken view (a block missing for
// the caller) is remembered for brokenTTL per snapshot and caller: each
// stat of a broken view redid its resolution, reading every block again.
type viewCache struct {
	mu     sync.Mutex
	views  map[string]*viewEntry // resolved and in flight
	order  []string              // resolved, oldest first
	bytes  int64                 // viewBytes of the resolved ones
	broken map[string]brokenEntry
	// resolving admits maxResolving resolutions at a time: each parses
	// a header and holds its block lists, up to about 120 MB for a
	// snapshot at the store's caps, and 16 at once took the daemon to
	// 2 GB.
	resolving chan struct{}
}

// maxResolving bounds the resolutions in flight (see viewCache.resolving).
const maxResolving = 2

// brokenEntry is a broken view's error, and until when it is answered
// without a new resolution.
type brokenEntry struct {
	err   error
	until time.Time
}

// A broken view is answered from the cache for brokenTTL (a block copied
// in meanwhile is seen after that long), for at most brokenMax snapshots
// and callers.
const (
	brokenTTL = 10 * time.Second
	brokenMax = 1024
)

// brokenKey names a snapshot's view as a caller resolves it in directory
// dir: a block may be missing in one directory's blocks/ and not in
// another's (the same manifest copied there with its blocks), and for one
// caller (not the caller's to read) and not for another, so the error is
// kept for the same directory and credentials only.
func brokenKey(id string, dir uint64, c *store.Cred) string {
	if c == nil {
		return fmt.Sprintf("%s/%d", id, dir)
	}
	return fmt.Sprintf("%s/%d/%d/%d/%v", id, dir, c.UID, c.GID, c.Groups)
}

// brokenErr returns the error remembered for key, if not expired.
func (c *viewCache) brokenErr(key string, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.broken[key]; ok && now.Before(e.until) {
		return e.err
	}
	return nil
}

// noteBroken remembers err for key, until now+brokenTTL.
func (c *viewCache) noteBroken(key string, err error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = map[string]brokenEntry{}
	}
	if len(c.broken) >= brokenMax {
		for k, e := range c.broken {
			if !now.Before(e.until) {
				delete(c.broken, k)
			}
		}
		for k := range c.broken {
			if len(c.broken) < brokenMax {
				break
			}
			delete(c.broken, k)
		}
	}
	c.broken[key] = brokenEntry{err: err, until: now.Add(brokenTTL)}
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

// viewBytes estimates the memory a view holds: its prefix, header and
// block lists (mlx.WholeView.MemBytes). Counting the prefix alone, 64
// views of 65,536 block references each were counted as 2 MB and held
// 600 MB.
func viewBytes(v *mlx.WholeView) int64 {
	if v == nil {
		return 0
	}
	return v.MemBytes()
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
	if c.resolving == nil {
		c.resolving = make(chan struct{}, maxResolving)
	}
	sem := c.resolving
	c.mu.Unlock()

	select {
	case sem <- struct{}{}:
		e.v, e.err = resolve()
		<-sem
	case <-ctx.Done():
		e.err = ctx.Err() // the waiters, if any, ask again
	}
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
