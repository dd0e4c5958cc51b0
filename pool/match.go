package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// snapInfo describes the file of size bytes at r, published as path, if
// path names a snapshot (.mlxkv) and its header parses; nil otherwise (a
// file that is not a snapshot is published all the same, and is never a
// lookup's answer).
func snapInfo(r io.ReaderAt, size int64, path string) *SnapInfo {
	// The engine writes NAME.mlxkv.tmp and renames it: the record is
	// made at the publish of the temporary name, and moves with it.
	if !strings.HasSuffix(path, ".mlxkv") && !strings.HasSuffix(path, ".mlxkv.tmp") {
		return nil
	}
	sn, _ := snapRecord(r, size, path)
	return sn
}

// snapRecord is snapInfo with the read error that kept it from telling
// whether the file is a snapshot (nil, nil: it is not one).
func snapRecord(r io.ReaderAt, size int64, path string) (*SnapInfo, error) {
	s, err := mlx.Parse(r, size, path)
	var fe *mlx.FormatError
	if errors.As(err, &fe) && fe.Check == "read" {
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	h := s.Header
	keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, h.Tokens)
	sn := &SnapInfo{Model: h.ModelID, Fingerprint: h.ConfigFingerprint, NS: h.NS, Tokens: int64(len(h.Tokens)),
		MinReusable: mlx.MinReusable(h), Trimmable: mlx.Trimmable(h), Keys: make([][32]byte, len(keys))}
	for i, k := range keys {
		sn.Keys[i] = k
	}
	if checkSnap(sn.Model, sn.Fingerprint, sn.NS, sn.Tokens, sn.MinReusable, len(sn.Keys)) != nil {
		return nil, nil // beyond what a manifest may hold: not indexed
	}
	return sn, nil
}

// namedSnap is one snapshot name as a lookup sees it.
type namedSnap struct {
	path    string
	created int64 // the name's etcd CreateRevision: the earliest published wins a tie
	snap    *SnapInfo
	owner   *Owner // its owner and mode (owner.go), nil if none recorded
	depth   int    // how many of the prompt's groups its chain keys share
}

// Match finds the pool's snapshot whose tokens best seed prompt q, by the
// rules of the single-host lookup (docs/PREFIX.md, store.Match): p =
// min(common prefix, len(prompt)-1); the longest p wins, a tie goes to
// the earliest published name; a snapshot must be reusable at p and, if
// longer, trimmable. Candidates come from the chain keys in the names'
// manifests (read once per host: they are immutable); each candidate that
// may win is then opened and its own header read, through checked chunks,
// so that what a manifest claims only chooses what to read. Only names
// ending in .mlxkv are answers.
func (p *Pool) Match(ctx context.Context, q store.MatchQuery) (*store.MatchResult, error) {
	snaps, err := p.snapshots(ctx, "match")
	if err != nil {
		return nil, err
	}
	keys := mlx.ChainKeys(q.Model, q.Fingerprint, q.NS, q.Tokens)
	var cands []*namedSnap
	model, ns := false, false
	for _, c := range snaps {
		sn := c.snap
		if sn.Model != q.Model || sn.Fingerprint != q.Fingerprint {
			continue
		}
		model = true
		if sn.Keys[0] != keys[0] {
			continue
		}
		ns = true
		d := 0
		for d+1 < len(keys) && d+1 < len(sn.Keys) && sn.Keys[d+1] == keys[d+1] {
			d++
		}
		if d > 0 {
			c.depth = d
			cands = append(cands, c)
		}
	}
	switch {
	case !model:
		return &store.MatchResult{Reason: store.MissNoModel}, nil
	case !ns:
		return &store.MatchResult{Reason: store.MissNamespace}, nil
	case len(keys) < 2:
		return &store.MatchResult{Reason: store.MissPromptShort}, nil
	}
	// Deepest first: a candidate sharing d groups shares fewer than
	// 256(d+1) tokens, so once the best reaches that, the rest cannot
	// beat it.
	slices.SortFunc(cands, func(a, b *namedSnap) int {
		return cmp.Or(cmp.Compare(b.depth, a.depth), cmp.Compare(a.created, b.created))
	})
	prompt := int64(len(q.Tokens))
	var best *namedSnap
	var bestP, bestN, missP int64 = 0, 0, -1
	miss := store.MissNoCommonPrefix
	for _, c := range cands {
		if best != nil && bestP >= int64(c.depth+1)*mlx.GroupTokens {
			break
		}
		h, err := p.header(ctx, c.path)
		if err != nil {
			p.log.Warn("pool: match: a candidate's header unreadable; passed over", "path", c.path, "err", err)
			continue
		}
		if h.ModelID != q.Model || h.ConfigFingerprint != q.Fingerprint || h.NS != q.NS {
			continue // its manifest's record was wrong
		}
		pl := min(commonPrefix(h.Tokens, q.Tokens), prompt-1)
		if pl <= 0 || !store.Better(pl, uint64(c.created), bestP, createdOf(best)) {
			continue
		}
		if why := store.Rejection(pl, int64(len(h.Tokens)), mlx.MinReusable(h), mlx.Trimmable(h)); why != "" {
			if pl > missP {
				miss, missP = why, pl
			}
			continue
		}
		best, bestP, bestN = c, pl, int64(len(h.Tokens))
	}
	if best == nil {
		return &store.MatchResult{Reason: miss}, nil
	}
	// From the header read, never the manifest's record (red team 21).
	r := &store.MatchResult{Hit: true, Path: best.path, Tokens: bestP, SnapshotTokens: bestN, Trim: bestN > bestP}
	if !utf8.ValidString(best.path) {
		r.PathBytes = []byte(best.path)
	}
	return r, nil
}

// snapshots lists the pool's .mlxkv names with their snapshot records
// (a manifest's, or one made from the header of a file published without
// one), earliest published first. A name whose manifest cannot be read
// is passed over, logged.
func (p *Pool) snapshots(ctx context.Context, op string) ([]*namedSnap, error) {
	octx, cancel := p.op(ctx)
	tx, err := p.coord.cli.Txn(octx).Then(clientv3.OpGet(p.coord.namesPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(p.coord.attrsKey(""), clientv3.WithPrefix())).Commit()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: etcd: list names: %w", op, p.explain(ctx, err))
	}
	owners := map[string]*Owner{}
	for _, kv := range tx.Responses[1].GetResponseRange().Kvs {
		owners[string(kv.Key[len(p.coord.attrsKey("")):])] = decodeOwner(string(kv.Value))
	}
	var out []*namedSnap
	for _, kv := range tx.Responses[0].GetResponseRange().Kvs {
		path := string(kv.Key[len(p.coord.namesPrefix()):])
		if !strings.HasSuffix(path, ".mlxkv") {
			continue
		}
		p.mu.Lock()
		sn, known := p.snapOf[string(kv.Value)]
		p.mu.Unlock()
		if !known {
			m, err := p.manifest(ctx, string(kv.Value))
			if err != nil {
				// A name gone or damaged meanwhile is no candidate; the
				// lookup answers from the others.
				p.log.Warn("pool: "+op+": a snapshot's manifest unreadable; passed over", "path", path, "err", err)
				continue
			}
			p.learn(string(kv.Value), m)
			sn = m.Snap
		}
		if sn == nil {
			sn = p.lateSnap(ctx, path, string(kv.Value))
		}
		if sn != nil {
			out = append(out, &namedSnap{path: path, created: kv.CreateRevision, snap: sn, owner: owners[path]})
		}
	}
	slices.SortFunc(out, func(a, b *namedSnap) int { return cmp.Compare(a.created, b.created) })
	return out, nil
}

// Candidate is a pool snapshot indexed under a chain key, as its
// manifest's record says (a hint: MatchKey reads its header).
type Candidate struct {
	Path string
	// Created is the name's etcd CreateRevision: the earliest published
	// wins a tie.
	Created int64
	// Groups is how many groups of its tokens the key names
	// (ModelGroups: the key of its model, mlx.ModelKey).
	Groups int
	// Owner is its owner and mode (owner.go), nil if none recorded: a
	// mount answers a caller only with the files it may read.
	Owner *Owner
}

// ModelGroups is Candidate.Groups for a model's key.
const ModelGroups = -1

// Candidates returns the snapshots indexed under key, earliest published
// first: those whose record holds it as h(g) of their tokens, or as the
// key of their model (docs/PREFIX.md). A pool mount lists them in
// /.kvfs/candidates/<hex key>, so that kvfs match --mount gives kvfs
// match --pool's answer through the mount alone.
func (p *Pool) Candidates(ctx context.Context, key mlx.ChainKey) ([]Candidate, error) {
	snaps, err := p.snapshots(ctx, "candidates")
	if err != nil {
		return nil, err
	}
	var out []Candidate
	for _, c := range snaps {
		g := ModelGroups
		if mlx.ModelKey(c.snap.Model, c.snap.Fingerprint) != key {
			if g = slices.Index(c.snap.Keys, [32]byte(key)); g < 0 {
				continue
			}
		}
		out = append(out, Candidate{Path: c.path, Created: c.created, Groups: g, Owner: c.owner})
	}
	return out, nil
}

// MatchKey returns the snapshot that holds the prefix key names, as
// store.MatchKey does for a local store: of the candidates (Candidates),
// earliest published first, the first that may seed the key's
// GroupTokens × g tokens (any snapshot, for the key of a model or of a
// namespace), judged by its own header, read through checked chunks,
// among those visible says a caller may read (nil: all). A key that no
// such snapshot holds is fs.ErrNotExist.
func (p *Pool) MatchKey(ctx context.Context, key mlx.ChainKey, visible func(Candidate) bool) (*store.MatchResult, error) {
	cands, err := p.Candidates(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, c := range cands {
		if visible != nil && !visible(c) {
			continue
		}
		h, err := p.header(ctx, c.Path)
		if err != nil {
			p.log.Warn("pool: match: a candidate's header unreadable; passed over", "path", c.Path, "err", err)
			continue
		}
		n := int64(len(h.Tokens))
		r := &store.MatchResult{Hit: true, Path: c.Path, SnapshotTokens: n}
		if !utf8.ValidString(c.Path) {
			r.PathBytes = []byte(c.Path)
		}
		if c.Groups == ModelGroups {
			if mlx.ModelKey(h.ModelID, h.ConfigFingerprint) == key {
				return r, nil
			}
			continue
		}
		keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, h.Tokens)
		if c.Groups >= len(keys) || keys[c.Groups] != key {
			continue // its manifest's record was wrong
		}
		r.Tokens = int64(c.Groups) * mlx.GroupTokens
		r.Trim = n > r.Tokens
		if c.Groups == 0 || store.Rejection(r.Tokens, n, mlx.MinReusable(h), mlx.Trimmable(h)) == "" {
			return r, nil
		}
	}
	return nil, fmt.Errorf("match key %x: %w", key, fs.ErrNotExist)
}

// lateSnap is the snapshot record of a manifest published without one
// (a file renamed into a .mlxkv name, or published by a kvfs before the
// record), made from its header: once per manifest per host (manifests
// are immutable), nil for a file that is not a snapshot.
func (p *Pool) lateSnap(ctx context.Context, path, manifest string) *SnapInfo {
	p.mu.Lock()
	sn, done := p.snaps[manifest]
	p.mu.Unlock()
	if done {
		return sn
	}
	f, err := p.open(ctx, path)
	if err != nil {
		return nil // gone or unreadable now: try again next time
	}
	sn, err = snapRecord(readerAtContext{f, ctx}, f.Size(), path)
	if err != nil {
		return nil // unread: try again next time
	}
	p.mu.Lock()
	if len(p.snaps) >= maxTouched {
		clear(p.snaps)
	}
	p.snaps[manifest] = sn
	p.mu.Unlock()
	return sn
}

func createdOf(c *namedSnap) uint64 {
	if c == nil {
		return 0
	}
	return uint64(c.created)
}

// header opens a pool file and reads its snapshot header.
func (p *Pool) header(ctx context.Context, path string) (*mlx.Header, error) {
	f, err := p.open(ctx, path) // a lookup is not a use (evict.go)
	if err != nil {
		return nil, err
	}
	s, err := mlx.Parse(readerAtContext{f, ctx}, f.Size(), path)
	if err != nil {
		return nil, err
	}
	return s.Header, nil
}

// readerAtContext reads a File within ctx.
type readerAtContext struct {
	f   *File
	ctx context.Context
}

func (r readerAtContext) ReadAt(b []byte, off int64) (int, error) {
	return r.f.ReadAtContext(r.ctx, b, off)
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []uint32) int64 {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return int64(i)
		}
	}
	return int64(n)
}
