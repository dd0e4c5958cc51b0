package pool

import (
	"context"
	"fmt"
	"strings"
)

// Usage is what the pool holds, as every host sees it.
type Usage struct {
	Names        int   // file names
	LogicalBytes int64 // the files' sizes, summed over the names
	LiveBytes    int64 // the distinct chunks the names reach
	Manifests    int   // manifest objects, reached or not
	Packs        int   // pack objects, reached or not
	PackBytes    int64 // bytes of the pack objects
	// DeadBytes are pack bytes no name reaches: removed files, chunks a
	// rewrite copied, publishes that failed. A collection reclaims them
	// (the sweep, and the rewrite of packs that are mostly dead).
	DeadBytes int64
}

// DedupRatio is logical over live bytes (1 when nothing is stored).
func (u *Usage) DedupRatio() float64 {
	if u.LiveBytes == 0 {
		return 1
	}
	return float64(u.LogicalBytes) / float64(u.LiveBytes)
}

// Usage reads the pool's totals: the names and their manifests from etcd
// and S3, and a listing of the objects. It reads every manifest the names
// reach (each once per host: they are immutable), so it takes a while on
// a large pool.
func (p *Pool) Usage(ctx context.Context) (*Usage, error) {
	octx, cancel := p.op(ctx)
	names, _, err := p.coord.names(octx, "", 0)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("usage: %w", p.explain(ctx, err))
	}
	u := &Usage{Names: len(names)}
	live := map[loc]bool{}
	for path, name := range names {
		m, err := p.manifest(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("usage: name %s: %w", path, p.explain(ctx, err))
		}
		p.learn(name, m)
		u.LogicalBytes += m.Size
		for _, c := range m.Chunks {
			l := loc{pack: c.Pack, off: c.Off, len: c.Len}
			if !live[l] {
				live[l] = true
				u.LiveBytes += c.Len
			}
		}
	}
	for _, dir := range []string{manifestDir, packDir} {
		lctx, cancel := p.op(ctx)
		err := p.objs.List(lctx, dir, func(o ObjectInfo) error {
			if rest, ok := strings.CutPrefix(o.Name, dir); !ok || !isHash(rest) {
				return nil
			}
			if dir == packDir {
				u.Packs++
				u.PackBytes += o.Size
			} else {
				u.Manifests++
			}
			return nil
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("usage: %w", p.explain(ctx, err))
		}
	}
	u.DeadBytes = max(0, u.PackBytes-u.LiveBytes)
	return u, nil
}
