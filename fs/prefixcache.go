package fs

import (
	"context"
	"sync"

	"github.com/kvfs/kvfs/mlx"
)

// prefixKey names one prefix view: the original's version (its inode and
// manifest ID: a rewrite commits a new version), the directory whose
// blocks/ it reads, and N.
type prefixKey struct {
	ino      uint64
	manifest string
	dir      uint64
	n        int64
}

// prefixCache keeps made prefix views, whose tensor hashes cost reading
// the N tokens' bytes. Committed content never changes, so a view is
// valid for as long as its key's version exists; a view of an older
// version of a file (by file ID) is dropped when a view of a newer one is
// made, and the cache keeps at most prefixCacheSize views and, beyond the
// newest, prefixCacheBytes of their estimated memory. Requests for a view
// being made wait for it. Errors are not kept.
type prefixCache struct {
	mu    sync.Mutex
	views map[prefixKey]*prefixEntry
	order []prefixKey // made, oldest first
	bytes int64
	// making admits maxResolving makings at a time, as viewCache does.
	making chan struct{}
}

const (
	prefixCacheSize  = 64
	prefixCacheBytes = 256 << 20
)

type prefixEntry struct {
	done chan struct{}
	id   uint64 // the original's file ID
	v    *mlx.PrefixView
	err  error
}

// do returns the view of key, made by build unless it is cached or being
// made. A caller whose ctx ends stops waiting; the making goes on.
func (c *prefixCache) do(ctx context.Context, key prefixKey, id uint64, build func() (*mlx.PrefixView, error)) (*mlx.PrefixView, error) {
	c.mu.Lock()
	if c.views == nil {
		c.views = map[prefixKey]*prefixEntry{}
		c.making = make(chan struct{}, maxResolving)
	}
	if e, ok := c.views[key]; ok {
		c.mu.Unlock()
		select {
		case <-e.done:
			return e.v, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e := &prefixEntry{done: make(chan struct{}), id: id}
	c.views[key] = e
	sem := c.making
	c.mu.Unlock()

	select {
	case sem <- struct{}{}:
		e.v, e.err = build()
		<-sem
	case <-ctx.Done():
		e.err = ctx.Err()
	}
	close(e.done)

	c.mu.Lock()
	defer c.mu.Unlock()
	if e.err != nil {
		delete(c.views, key)
		return nil, e.err
	}
	// Dropped with the original: views of the file's other versions.
	kept := c.order[:0]
	for _, k := range c.order {
		if o := c.views[k]; o.id == id && (k.ino != key.ino || k.manifest != key.manifest) {
			c.bytes -= o.v.MemBytes()
			delete(c.views, k)
			continue
		}
		kept = append(kept, k)
	}
	c.order = append(kept, key)
	c.bytes += e.v.MemBytes()
	for len(c.order) > 1 && (len(c.order) > prefixCacheSize || c.bytes > prefixCacheBytes) {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= c.views[old].v.MemBytes()
		delete(c.views, old)
	}
	return e.v, nil
}
