package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// A pool of hosts (package pool) keeps its chunks in an object store, not
// in a Store, but cuts files exactly as a store does, so that a
// prefix-growth series published through several hosts shares its rows
// as it does on one (issue 30: cut every MiB from offset 0, it shared
// nothing). Cut is the store's planner and cutter without the store: the
// caller supplies the parent, from wherever it keeps its files.

// Chunk is one chunk of a file cut by Cut: Len bytes at Off, whose
// sha256 is Sum.
type Chunk struct {
	Off, Len int64
	Sum      [32]byte
}

// Lineage is what a file's parent is found by: its layout key (files
// whose rows correspond have the same one) and its tokens (the parent is
// the file of the longest common prefix of them). Layout is empty for a
// file no parent can serve: one of no format with rows.
type Lineage struct {
	Kind   string // "mlxkv", "llama", "safetensors", "blob" or "plain"
	Layout string
	Tokens []uint32
}

// CutParent is a file a new one may reuse the chunks of: its bytes (only
// its header is read) and its chunks' lengths and sums, in file order.
type CutParent struct {
	Path   string // for its format, when its name says it (.mlxkv)
	Src    io.ReaderAt
	Size   int64
	Chunks []Chunk // Off is not used
}

// CutOptions says how Cut cuts a file.
type CutOptions struct {
	// ChunkSize is the longest chunk (C); files of no format are cut by
	// content into chunks of C/8 to C. 0 means DefaultChunkSize.
	ChunkSize int64
	// Fixed cuts bytes of no parsed format every ChunkSize bytes, not by
	// content (a store's chunking=fixed).
	Fixed bool
	// Path is the file's name (for errors and logs; a name ending in
	// .mlxkv is parsed as a snapshot even if its bytes do not say so).
	Path string
	// Parent returns the file a file of lineage l reuses the rows of,
	// or nil. It is called at most once, before any bytes are cut; nil
	// means no parent.
	Parent func(l Lineage) *CutParent
	// Log receives why a file of a recognised format is cut as plain
	// bytes; nil discards it.
	Log *slog.Logger
}

// ErrShortSource is Cut's error for a source that ends before its size.
var ErrShortSource = errors.New("the file is shorter than its size (changed while it was cut?)")

// LineageOf parses src's format, within the store's default caps, and
// returns what its parent would be found by.
func LineageOf(src io.ReaderAt, size int64, path string) Lineage {
	pl := newCutPlanner(CutOptions{Path: path}, DefaultChunkSize)
	p := pl.plan(src, size, cutComps(path))
	return Lineage{Kind: p.kind, Layout: p.layout, Tokens: p.tokens}
}

// Cut cuts the size bytes of src into chunks as a store of chunk size
// opt.ChunkSize with content cuts would, with opt.Parent's chunks reused
// where the bytes match them, and calls fn with each batch of chunks, in
// file order, and the batch's bytes (chunk c is data[c.Off-base:][:c.Len];
// chunks and data are reused after fn returns). Runs of zeros are cut every C bytes
// (a store keeps them as zero runs). It returns the file's lineage.
func Cut(ctx context.Context, src io.ReaderAt, size int64, opt CutOptions, fn func(chunks []Chunk, base int64, data []byte) error) (Lineage, error) {
	C := opt.ChunkSize
	if C == 0 {
		C = DefaultChunkSize
	}
	if C < MinChunkSize || C > MaxChunkSize {
		return Lineage{}, fmt.Errorf("cut %s: chunk size %d: want %d to %d", opt.Path, C, MinChunkSize, MaxChunkSize)
	}
	pl := newCutPlanner(opt, C)
	p := pl.plan(src, size, cutComps(opt.Path))
	lin := Lineage{Kind: p.kind, Layout: p.layout, Tokens: p.tokens}
	zeroSum := map[int64][32]byte{}
	var buf []byte
	var out []Chunk
	regs := p.regions
	for len(regs) > 0 {
		if err := ctx.Err(); err != nil {
			return lin, err
		}
		base := regs[0].off
		var batch []region
		var n int64
		batch, regs, n = takeBatch(regs, C)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		data := buf[:n]
		if got, err := src.ReadAt(data, base); int64(got) < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = ErrShortSource
			}
			return lin, fmt.Errorf("cut %s: read at %d: %w", opt.Path, base, err)
		}
		refs, err := cutBatch(batch, base, data, C, cdcCuts, func(_ int64, b []byte) blockstore.ID { return blockstore.Sum(b) })
		if err != nil {
			return lin, fmt.Errorf("cut %s: %w", opt.Path, err)
		}
		out = out[:0]
		for _, c := range refs {
			if !c.zero {
				out = append(out, Chunk{Off: c.off, Len: c.n, Sum: c.id})
				continue
			}
			for o := int64(0); o < c.n; o += C {
				k := min(C, c.n-o)
				sum, ok := zeroSum[k]
				if !ok {
					sum = blockstore.Sum(make([]byte, k))
					zeroSum[k] = sum
				}
				out = append(out, Chunk{Off: c.off + o, Len: k, Sum: sum})
			}
		}
		if err := fn(out, base, data); err != nil {
			return lin, err
		}
	}
	return lin, nil
}

// cutComps is a path's components as planFor takes them.
func cutComps(path string) []string {
	comps := strings.Split(strings.Trim(path, "/"), "/")
	if len(comps) == 0 {
		comps = []string{""}
	}
	return comps
}

// newCutPlanner is the planner of Cut: the default caps, content cuts,
// and opt.Parent for parents.
func newCutPlanner(opt CutOptions, C int64) planner {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, content := cdcParams(C)
	content = content && !opt.Fixed
	pl := planner{caps: snapshotCaps{tokens: DefaultMaxSnapshotTokens, blockRefs: DefaultMaxSnapshotBlockRefs}, log: log, content: content}
	pl.parent = func(key string, tokens []uint32, rows rowsFunc) *parentSnap {
		if opt.Parent == nil {
			return nil
		}
		cp := opt.Parent(Lineage{Layout: key, Tokens: tokens})
		if cp == nil {
			return nil
		}
		return cutParent(cp, key, tokens, rows)
	}
	return pl
}

// cutParent makes a parentSnap of a caller's parent: its rows, of layout
// key, and its tokens' common prefix with the new file's.
//
// A caller's parent is untrusted bytes (another host's file): it is
// parsed within the default caps (LineageOf) before its rows are.
func cutParent(cp *CutParent, key string, tokens []uint32, rows rowsFunc) *parentSnap {
	plin := LineageOf(cp.Src, cp.Size, cp.Path)
	if plin.Layout != key {
		return nil
	}
	pkey, slots, err := rows(cp.Src, cp.Size)
	if err != nil || pkey != key {
		return nil
	}
	common := 0
	for common < len(tokens) && common < len(plin.Tokens) && tokens[common] == plin.Tokens[common] {
		common++
	}
	if common == 0 {
		return nil
	}
	p := &parentSnap{slots: slots, common: common, tokens: len(plin.Tokens), child: len(tokens)}
	var off int64
	for _, c := range cp.Chunks {
		p.starts = append(p.starts, off)
		p.m = append(p.m, manifest.Extent{ID: c.Sum, Len: c.Len})
		off += c.Len
	}
	if off != cp.Size {
		return nil // chunks that do not cover the file: not a parent
	}
	return p
}
