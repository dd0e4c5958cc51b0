package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
)

// Longest-prefix lookup across every process's snapshots (docs/PREFIX.md,
// issue 11). Committed snapshots are indexed by token-chain key
// (manifest/prefix.go); a lookup finds the snapshots sharing the prompt's
// longest whole-group prefix and applies the engine's rules (FORMAT.md
// §5.3) to them, seeing only snapshots the caller may read.

// Miss reasons (docs/PREFIX.md lists them with their meaning).
const (
	MissNoModel        = "no-snapshot-for-model"
	MissNamespace      = "namespace"
	MissPromptShort    = "prompt-shorter-than-group"
	MissNoCommonPrefix = "no-common-prefix"
	MissMinimum        = "shorter-than-minimum"
	MissNotTrimmable   = "not-trimmable"
)

// MissReasons lists every miss reason, in the order lookups test them.
var MissReasons = []string{MissNoModel, MissNamespace, MissPromptShort, MissNoCommonPrefix, MissMinimum, MissNotTrimmable}

// MatchQuery is a prompt to match: the engine's store identity (header
// fields modelId and configFingerprint), its namespace (header field ns,
// "" for the base model) and the prompt's tokens.
type MatchQuery struct {
	Model       string   `json:"model"`
	Fingerprint string   `json:"fingerprint"`
	NS          string   `json:"ns"`
	Tokens      []uint32 `json:"tokens"`
}

// MatchResult is a lookup's answer: on a hit, the snapshot (path from the
// store root, no leading slash), how many of its tokens the prompt may
// reuse (Tokens, the engine's prefixLen), its own token count, and
// whether the engine must trim it; on a miss, why.
type MatchResult struct {
	Hit  bool   `json:"hit"`
	Path string `json:"path,omitempty"`
	// PathBytes is Path again, as bytes (base64 in JSON), for a path that
	// is not UTF-8: JSON strings cannot carry it (its bad bytes become
	// U+FFFD), and a client must be able to open what it names.
	PathBytes      []byte `json:"pathBytes,omitempty"`
	Tokens         int64  `json:"tokens"`
	SnapshotTokens int64  `json:"snapshotTokens,omitempty"`
	Trim           bool   `json:"trim,omitempty"`
	Reason         string `json:"reason,omitempty"`
	Ino            uint64 `json:"-"`
}

// matchCounts counts lookups by outcome, for /.kvfs/stats and metrics.
type matchCounts struct {
	mu     sync.Mutex
	hits   uint64
	misses map[string]uint64
}

func (m *matchCounts) add(r *MatchResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.Hit {
		m.hits++
		return
	}
	if m.misses == nil {
		m.misses = map[string]uint64{}
	}
	m.misses[r.Reason]++
}

// MatchStats are the lookups made since the store was opened.
type MatchStats struct {
	Hits   uint64            `json:"hits"`
	Misses map[string]uint64 `json:"misses"` // by reason; every reason present
}

// MatchStats returns the counts of lookups by outcome.
func (s *Store) MatchStats() MatchStats {
	s.matches.mu.Lock()
	defer s.matches.mu.Unlock()
	out := MatchStats{Hits: s.matches.hits, Misses: map[string]uint64{}}
	for _, r := range MissReasons {
		out.Misses[r] = s.matches.misses[r]
	}
	return out
}

// prefixRecord is what the prefix index keeps of a snapshot's header.
func prefixRecord(h *mlx.Header) *manifest.PrefixRecord {
	keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, h.Tokens)
	r := &manifest.PrefixRecord{Trimmable: mlx.Trimmable(h), MinReusable: mlx.MinReusable(h),
		Keys: make([][manifest.PrefixKeyLen]byte, 0, len(keys)+1)}
	r.Keys = append(r.Keys, mlx.ModelKey(h.ModelID, h.ConfigFingerprint))
	for _, k := range keys {
		r.Keys = append(r.Keys, k)
	}
	return r
}

// LlamaFingerprint is the configFingerprint under which llama.cpp state
// files are indexed for prefix lookup, their model identity being their
// layout key (llamastate.File.Key): the files carry no model's name, and
// their shape (layers, cache types, row sizes, flash attention or not)
// is what decides whether one can seed another's prompt. A client takes
// both from a state file of its own (kvfs match --like).
const LlamaFingerprint = "llama.cpp"

// llamaPrefixRecord is what the prefix index keeps of a llama.cpp state
// file: the chain keys of its tokens under its layout key, in no
// namespace; any prefix of it is reusable (a trimmed view,
// /.kvfs/prefix/PATH@N), if llamastate.Trim can cut it at all.
func llamaPrefixRecord(f *llamastate.File, src io.ReaderAt) *manifest.PrefixRecord {
	key := f.Key()
	keys := mlx.ChainKeys(key, LlamaFingerprint, "", f.Tokens)
	_, err := llamastate.Trim(f, src, int64(len(f.Tokens)))
	r := &manifest.PrefixRecord{Trimmable: err == nil, Keys: make([][manifest.PrefixKeyLen]byte, 0, len(keys)+1)}
	r.Keys = append(r.Keys, mlx.ModelKey(key, LlamaFingerprint))
	for _, k := range keys {
		r.Keys = append(r.Keys, k)
	}
	return r
}

// candidate is an indexed snapshot a caller may read.
type candidate struct {
	n      *manifest.Inode
	rec    *manifest.PrefixRecord
	tokens []byte // u32 LE, valid in the transaction
}

// snapshotOf returns the committed snapshot ino with its tokens, or nil:
// a .mlxkv (a .mlxkv.tmp is still being written, as the engine's scan
// deletes it) or a llama.cpp state file (named as its user chose), with
// a name. Whether a caller may read it is checked apart (allow), only for
// snapshots that could be the answer.
func snapshotOf(tx *manifest.Tx, ino uint64) *candidate {
	n, err := tx.Inode(ino)
	if err != nil || n.Parent == 0 || n.Layout == "" || n.Kind != kindLlama && !strings.HasSuffix(n.Name, ".mlxkv") {
		return nil
	}
	tokens, err := tx.SnapshotTokens(n.Layout, ino)
	if err != nil {
		return nil
	}
	return &candidate{n: n, tokens: tokens}
}

// allow reports whether c may read cd where it is, and loads its record.
func (cd *candidate) allow(tx *manifest.Tx, c *Cred) bool {
	if !c.mayReadInode(tx, cd.n) {
		return false
	}
	rec, err := tx.Prefix(cd.n.Ino)
	cd.rec = rec
	return err == nil
}

// visible returns the snapshot ino if c may read it, or nil.
func visible(tx *manifest.Tx, ino uint64, c *Cred) *candidate {
	cd := snapshotOf(tx, ino)
	if cd == nil || !cd.allow(tx, c) {
		return nil
	}
	return cd
}

// anyVisible reports whether some snapshot c may read is indexed under key.
func anyVisible(tx *manifest.Tx, key mlx.ChainKey, c *Cred) bool {
	found := false
	tx.PrefixInodes(key, func(ino uint64, _ uint32) bool {
		found = visible(tx, ino, c) != nil
		return !found
	})
	return found
}

// commonPrefix is the length of the common prefix of a (u32 LE) and b.
func commonPrefix(a []byte, b []uint32) int64 {
	n := min(len(a)/4, len(b))
	i := 0
	for i < n && binary.LittleEndian.Uint32(a[4*i:]) == b[i] {
		i++
	}
	return int64(i)
}

// Rejection applies the engine's rules (FORMAT.md §5.3) to a snapshot of
// n tokens that would seed p tokens of a prompt (p = min(common prefix,
// len(prompt)-1), p > 0): the miss reason that rules it out, or "" when it
// can seed them. Match, MatchKey and a client walking /.kvfs/candidates
// (kvfs match --mount) all judge by it, so that they agree.
func Rejection(p, n, minReusable int64, trimmable bool) string {
	switch {
	case p < minReusable:
		return MissMinimum
	case n > p && !trimmable:
		return MissNotTrimmable
	}
	return ""
}

// Better reports whether a usable snapshot ino seeding p tokens beats the
// best so far (bestP tokens, snapshot bestIno; bestIno 0: none yet):
// strictly longer wins, and a tie goes to the earliest committed, the
// lowest inode number (the engine keeps the first entry it indexed).
func Better(p int64, ino uint64, bestP int64, bestIno uint64) bool {
	return bestIno == 0 || p > bestP || p == bestP && ino < bestIno
}

func bestIno(cd *candidate) uint64 {
	if cd == nil {
		return 0
	}
	return cd.n.Ino
}

// Match finds the snapshot whose tokens best seed prompt q, by the
// engine's rules (FORMAT.md §5.3): p = min(common prefix, len(prompt)-1);
// strictly longer p wins, ties going to the earliest committed (lowest
// inode); p must reach the snapshot's minimumReusableOffset; a snapshot
// longer than p must be trimmable. Only snapshots sharing at least one
// whole group (256 tokens) with the prompt are found, and only those c may
// read (nil: the daemon). Every call is counted in MatchStats.
func (s *Store) Match(q MatchQuery, c *Cred) (*MatchResult, error) {
	var r *MatchResult
	err := s.db.View(func(tx *manifest.Tx) error {
		var err error
		r, err = match(tx, q, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("match %s/%s/%q: %w", q.Model, q.Fingerprint, q.NS, err)
	}
	s.matches.add(r)
	return r, nil
}

func match(tx *manifest.Tx, q MatchQuery, c *Cred) (*MatchResult, error) {
	keys := mlx.ChainKeys(q.Model, q.Fingerprint, q.NS, q.Tokens)
	switch {
	case !anyVisible(tx, mlx.ModelKey(q.Model, q.Fingerprint), c):
		return &MatchResult{Reason: MissNoModel}, nil
	case !anyVisible(tx, keys[0], c):
		return &MatchResult{Reason: MissNamespace}, nil
	case len(keys) < 2:
		return &MatchResult{Reason: MissPromptShort}, nil
	}
	var best *candidate
	var bestP int64
	var miss string // the rejection of the longest rejected candidate
	var missP int64 = -1
	seen := map[uint64]bool{}
	prompt := int64(len(q.Tokens))
	// From the longest shared group down: a snapshot first found under
	// h(k) shares fewer than 256(k+1) tokens, so once the best reaches
	// that, no shorter key can beat it.
	for k := len(keys) - 1; k >= 1; k-- {
		if best != nil && bestP >= int64(k+1)*mlx.GroupTokens {
			break
		}
		tx.PrefixInodes(keys[k], func(ino uint64, _ uint32) bool {
			if seen[ino] {
				return true
			}
			seen[ino] = true
			cd := snapshotOf(tx, ino)
			if cd == nil {
				return true
			}
			p := min(commonPrefix(cd.tokens, q.Tokens), prompt-1)
			reject := func(why string) {
				if p > missP {
					miss, missP = why, p
				}
			}
			// Whether it may win first: the permission check and the
			// record are read only for those that may.
			switch {
			case p <= 0:
				return true
			case !Better(p, ino, bestP, bestIno(best)):
				return true
			case !cd.allow(tx, c):
				return true
			}
			if why := Rejection(p, int64(len(cd.tokens)/4), cd.rec.MinReusable, cd.rec.Trimmable); why != "" {
				reject(why)
			} else {
				best, bestP = cd, p
			}
			return true
		})
	}
	if best == nil {
		if miss == "" {
			miss = MissNoCommonPrefix
		}
		return &MatchResult{Reason: miss}, nil
	}
	p := inoPath(tx, best.n)
	n := int64(len(best.tokens) / 4)
	return hit(p, bestP, n, best.n.Ino), nil
}

// hit is the answer snapshot ino at path p, of n tokens, for a prefix of
// tokens.
func hit(p string, tokens, n int64, ino uint64) *MatchResult {
	r := &MatchResult{Hit: true, Path: p, Tokens: tokens, SnapshotTokens: n, Trim: n > tokens, Ino: ino}
	if !utf8.ValidString(p) {
		r.PathBytes = []byte(p)
	}
	return r
}

// MatchKey answers for the prefix that chain key names (docs/PREFIX.md:
// /.kvfs/match/<hex>): the snapshot, among those c may read that are
// indexed under key, that can seed exactly that prefix of 256k tokens:
// one of exactly that length, or a longer trimmable one, whose
// minimumReusableOffset is at most 256k; the earliest committed wins. The
// model key and h0 name no prefix: they lead to the earliest committed
// snapshot of that model or namespace, with 0 tokens, so that a client of
// the tree can tell the misses no-snapshot-for-model and namespace apart.
// A key of no such snapshot is a miss with no reason told (ErrNotFound),
// so that the tree reveals nothing of what c may not read.
func (s *Store) MatchKey(key mlx.ChainKey, c *Cred) (*MatchResult, error) {
	var r *MatchResult
	err := s.db.View(func(tx *manifest.Tx) error {
		var best *candidate
		var prefix int64
		tx.PrefixInodes(key, func(ino uint64, groups uint32) bool {
			cd := visible(tx, ino, c)
			if cd == nil {
				return true
			}
			if groups == 0 || groups == manifest.ModelGroups {
				best = cd // the key of a model or a namespace: any snapshot of it
				return false
			}
			p := int64(groups) * mlx.GroupTokens
			if Rejection(p, int64(len(cd.tokens)/4), cd.rec.MinReusable, cd.rec.Trimmable) != "" {
				return true
			}
			best, prefix = cd, p
			return false
		})
		if best == nil {
			return manifest.ErrNotFound
		}
		p := inoPath(tx, best.n)
		n := int64(len(best.tokens) / 4)
		r = hit(p, prefix, n, best.n.Ino)
		return nil
	})
	if errors.Is(err, manifest.ErrNotFound) {
		return nil, fmt.Errorf("match key %x: %w", key, fs.ErrNotExist)
	} else if err != nil {
		return nil, fmt.Errorf("match key %x: %w", key, err)
	}
	return r, nil
}

// indexPrefixes builds the prefix index of a store made before it
// (manifest's prefixIndexed mark is missing): each indexed snapshot's
// header is read back from the store and its keys added, then the mark is
// set. It runs once, at open; a snapshot committed meanwhile is indexed
// by its own commit. A snapshot whose header no longer parses is skipped
// (logged): it could not have been indexed at its commit either.
func (s *Store) indexPrefixes() error {
	var inos []uint64
	indexed := false
	err := s.db.View(func(tx *manifest.Tx) error {
		if indexed = tx.PrefixIndexed(); indexed {
			return nil
		}
		return tx.ForEachInode(func(n *manifest.Inode) error {
			if n.Layout != "" {
				inos = append(inos, n.Ino)
			}
			return nil
		})
	})
	if err != nil || indexed {
		return err
	}
	recs := map[uint64]*manifest.PrefixRecord{}
	for _, ino := range inos {
		f, err := s.OpenIno(ino)
		if err != nil {
			continue // removed meanwhile
		}
		snap, err := mlx.Parse(f, f.Size(), fmt.Sprintf("inode %d", ino))
		f.Close()
		if err != nil {
			s.log.Warn("prefix index: snapshot header unreadable; not indexed", "ino", ino, "err", err)
			continue
		}
		recs[ino] = prefixRecord(snap.Header)
	}
	s.log.Info("prefix index built for an existing store", "snapshots", len(recs))
	return s.db.Update(func(tx *manifest.Tx) error {
		for ino, r := range recs {
			if n, err := tx.Inode(ino); err != nil || n.Layout == "" {
				continue
			}
			if err := tx.AddPrefix(ino, r); err != nil {
				return err
			}
		}
		return tx.SetPrefixIndexed()
	})
}
