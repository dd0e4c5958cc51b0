package pool

import (
	"context"
	"io"

	"github.com/kvfs/kvfs/store"
)

// A publish cuts a file as a local store does (store.Cut): the rows of a
// snapshot, a llama.cpp state file or a safetensors cache are cut where
// its parent's chunks end, and the parent is the pool file of the same
// layout with the longest common token prefix. Each manifest of such a
// file records its lineage (LineageInfo: the layout key and the chain
// keys of its tokens), which a host learns with the manifest; a publish
// takes as its parent the named file whose keys share the most groups
// of 256 tokens with its own. Its rows are read from the parent's own
// header, through checked chunks, and its chunks are reused only where
// the new file's bytes hash to them, so a lineage that lies costs dedup,
// never a wrong byte.

// lineageInfo is the manifest record of a cut file's lineage, nil if it
// has none or one beyond what a manifest may hold.
func lineageInfo(l store.Lineage) *LineageInfo {
	if l.Layout == "" || len(l.Layout) > maxSnapString || len(l.Kind) > maxKindLen || int64(len(l.Tokens)) > maxLineageTokens {
		return nil
	}
	return &LineageInfo{Kind: l.Kind, Layout: l.Layout, Tokens: int64(len(l.Tokens)), Keys: lineageKeys(l.Layout, l.Tokens)}
}

// parentOf returns the file among names (path → manifest, as listed for
// this publish) that a file of lineage l reuses the rows of, or nil: of
// the same layout, the one whose chain keys share the most groups with
// l's; of those, the longest that is not longer than l, else the
// shortest; then the first path. The parent's bytes are read through the
// pool (its chunks checked as every read's are).
func (p *Pool) parentOf(ctx context.Context, l store.Lineage, names map[string]string) *store.CutParent {
	if l.Layout == "" || len(names) == 0 {
		return nil
	}
	keys := lineageKeys(l.Layout, l.Tokens)
	child := int64(len(l.Tokens))
	var best struct {
		path, manifest string
		depth          int
		tokens         int64
	}
	better := func(depth int, tokens int64, path string) bool {
		switch {
		case depth != best.depth:
			return depth > best.depth
		case (tokens <= child) != (best.tokens <= child):
			return tokens <= child
		case tokens != best.tokens:
			if tokens <= child {
				return tokens > best.tokens
			}
			return tokens < best.tokens
		}
		return path < best.path
	}
	p.mu.Lock()
	for path, name := range names {
		li := p.lineages[name]
		if li == nil || li.Layout != l.Layout || len(li.Keys) == 0 || li.Keys[0] != keys[0] {
			continue
		}
		depth := 0
		for depth < len(keys) && depth < len(li.Keys) && keys[depth] == li.Keys[depth] {
			depth++
		}
		if best.manifest == "" || better(depth, li.Tokens, path) {
			best.path, best.manifest, best.depth, best.tokens = path, name, depth, li.Tokens
		}
	}
	p.mu.Unlock()
	if best.manifest == "" {
		return nil
	}
	m, err := p.manifest(ctx, best.manifest)
	if err != nil {
		p.log.Info("pool: parent not read; published without one", "parent", best.path, "err", err)
		return nil
	}
	f := &File{p: p, path: best.path, m: m}
	cp := &store.CutParent{Path: best.path, Src: ctxReader{ctx, f}, Size: m.Size, Chunks: make([]store.Chunk, len(m.Chunks))}
	for i, c := range m.Chunks {
		cp.Chunks[i] = store.Chunk{Len: c.Len, Sum: c.Sum}
	}
	return cp
}

// ctxReader is a File's ReadAt under a context.
type ctxReader struct {
	ctx context.Context
	f   *File
}

func (r ctxReader) ReadAt(b []byte, off int64) (int, error) { return r.f.ReadAtContext(r.ctx, b, off) }

var _ io.ReaderAt = ctxReader{}
