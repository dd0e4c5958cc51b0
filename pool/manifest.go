package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"unsafe"

	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// Object names inside the pool's prefix. Both kinds are named by the
// sha256 of their bytes and never overwritten.
const (
	packDir     = "packs/"
	manifestDir = "manifests/"
)

// Limits on what a manifest may say; a manifest is untrusted bytes (any
// host, or anyone with write access to the bucket, may have written it).
const (
	maxManifestBytes = 64 << 20
	maxFileSize      = 1 << 46
	minChunkSize     = 4 << 10
	maxChunkSize     = 64 << 20
)

// Manifest is a pool file: its size and, in file order, where each of
// its chunks lies.
//
// Version 1 (kvfs before 2026-12-03) cut every file every ChunkSize
// bytes from offset 0; version 2 cuts as a local store does (row-aware
// and parent-aligned for the formats the store parses, by content for
// the rest: store.Cut), so each chunk records its length, and a read
// finds its chunks by binary search. A host that reads only version 1
// refuses a version 2 manifest with "manifest version 2: this kvfs reads
// version 1": every host of a pool must be upgraded before any publishes.
type Manifest struct {
	V         int   // 1 or 2; 0 encodes as 2
	Size      int64 // the file's length: the sum of its chunks' lengths
	ChunkSize int64 // version 1: every chunk but the last is this long
	Chunks    []ChunkRef
	// Snap describes a file that parsed as a snapshot when it was
	// published (match.go); nil for any other file.
	Snap *SnapInfo
	// Lineage is what a later publish finds this file as a parent by
	// (version 2; nil for a file of no format with rows).
	Lineage *LineageInfo

	ends []int64 // ends[i]: the file offset after chunk i
}

// LineageInfo is a manifest's record of what its file's parent is found
// by (store.Lineage): the layout key of its rows and the chain keys of
// its tokens under that key (lineageKeys). Like SnapInfo it is a hint
// from whoever published the manifest: a publish that takes the file as
// a parent parses the parent's own header, through checked chunks, and
// a chunk it reuses is one the new file's bytes hash to.
type LineageInfo struct {
	Kind, Layout string
	Tokens       int64
	Keys         [][32]byte // h(0) … h(Tokens/256)
}

// SnapInfo is what a lookup needs to choose a snapshot's candidates
// without reading it: its model, its token-chain keys (docs/PREFIX.md)
// and how far it may be trimmed. It is a hint, from whoever published
// the manifest: a lookup reads the candidate's own header (through
// checked chunks) before it answers.
type SnapInfo struct {
	Model, Fingerprint, NS string
	Tokens                 int64 // the snapshot's token count
	MinReusable            int64
	Trimmable              bool
	Keys                   [][32]byte // h(0) … h(Tokens/256)
}

// ChunkRef is one chunk: its sha256 and the pack object range holding it.
type ChunkRef struct {
	Sum  [32]byte
	Pack string // the pack object's hash, hex
	Off  int64
	Len  int64
}

type manifestJSON struct {
	V         int          `json:"v"`
	Size      int64        `json:"size"`
	ChunkSize int64        `json:"chunk_size,omitempty"`
	Chunks    []chunkJSON  `json:"chunks"`
	Snap      *snapJSON    `json:"snap,omitempty"`
	Lineage   *lineageJSON `json:"lineage,omitempty"`
}

type lineageJSON struct {
	Kind   string   `json:"kind"`
	Layout string   `json:"layout"`
	Tokens int64    `json:"tokens"`
	Keys   []string `json:"keys"`
}

type snapJSON struct {
	Model       string   `json:"model"`
	Fingerprint string   `json:"fingerprint"`
	NS          string   `json:"ns"`
	Tokens      int64    `json:"tokens"`
	MinReusable int64    `json:"min_reusable"`
	Trimmable   bool     `json:"trimmable"`
	Keys        []string `json:"keys"`
}

// Limits on a manifest's snapshot record.
const (
	maxSnapString = 4 << 10
	maxSnapTokens = 1 << 26 // far above any context length
	groupTokens   = 256     // mlx.GroupTokens
)

type chunkJSON struct {
	Sum  string `json:"sum"`
	Pack string `json:"pack"`
	Off  int64  `json:"off"`
	Len  int64  `json:"len,omitempty"` // version 2
}

// Encode is the manifest's object bytes and the name they go under.
func (m *Manifest) Encode() (name string, b []byte, err error) {
	v := m.V
	if v == 0 {
		v = 2
	}
	j := manifestJSON{V: v, Size: m.Size, Chunks: make([]chunkJSON, len(m.Chunks))}
	if v == 1 {
		j.ChunkSize = m.ChunkSize
	}
	for i, c := range m.Chunks {
		j.Chunks[i] = chunkJSON{Sum: hex.EncodeToString(c.Sum[:]), Pack: c.Pack, Off: c.Off}
		if v >= 2 {
			j.Chunks[i].Len = c.Len
		}
	}
	if l := m.Lineage; l != nil && v >= 2 {
		j.Lineage = &lineageJSON{Kind: l.Kind, Layout: l.Layout, Tokens: l.Tokens, Keys: make([]string, len(l.Keys))}
		for i, k := range l.Keys {
			j.Lineage.Keys[i] = hex.EncodeToString(k[:])
		}
	}
	if sn := m.Snap; sn != nil {
		j.Snap = &snapJSON{Model: sn.Model, Fingerprint: sn.Fingerprint, NS: sn.NS, Tokens: sn.Tokens,
			MinReusable: sn.MinReusable, Trimmable: sn.Trimmable, Keys: make([]string, len(sn.Keys))}
		for i, k := range sn.Keys {
			j.Snap.Keys[i] = hex.EncodeToString(k[:])
		}
	}
	b, err = json.Marshal(j)
	if err != nil {
		return "", nil, err
	}
	if _, err := DecodeManifest(b); err != nil {
		return "", nil, fmt.Errorf("encode manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), b, nil
}

// ChunkLen is the length of chunk i of a file of size bytes.
func chunkLen(size, chunkSize int64, i int) int64 {
	return min(chunkSize, size-int64(i)*chunkSize)
}

// DecodeManifest parses and checks a manifest object's bytes: it must
// describe exactly the chunks its size needs, with sane ranges.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("manifest of %d bytes: over the limit of %d", len(b), maxManifestBytes)
	}
	var j manifestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if j.V != 1 && j.V != 2 {
		return nil, fmt.Errorf("manifest version %d: this kvfs reads versions 1 and 2 (a newer kvfs wrote it?)", j.V)
	}
	if j.Size < 0 || j.Size > maxFileSize {
		return nil, fmt.Errorf("manifest size %d: want 0 to %d", j.Size, int64(maxFileSize))
	}
	m := &Manifest{V: j.V, Size: j.Size, Chunks: make([]ChunkRef, len(j.Chunks))}
	if j.V == 1 {
		if j.ChunkSize < minChunkSize || j.ChunkSize > maxChunkSize {
			return nil, fmt.Errorf("manifest chunk size %d: want %d to %d", j.ChunkSize, minChunkSize, maxChunkSize)
		}
		want := (j.Size + j.ChunkSize - 1) / j.ChunkSize
		if int64(len(j.Chunks)) != want {
			return nil, fmt.Errorf("manifest of %d bytes lists %d chunks of %d, want %d", j.Size, len(j.Chunks), j.ChunkSize, want)
		}
		m.ChunkSize = j.ChunkSize
	} else if j.ChunkSize != 0 {
		return nil, fmt.Errorf("manifest version 2 with a chunk size: chunks record their lengths")
	}
	m.ends = make([]int64, len(j.Chunks))
	var end int64
	for i, c := range j.Chunks {
		sum, err := hex.DecodeString(c.Sum)
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("manifest chunk %d: sum %q is not a sha256", i, c.Sum)
		}
		if !isHash(c.Pack) {
			return nil, fmt.Errorf("manifest chunk %d: pack %q is not a sha256", i, c.Pack)
		}
		n := c.Len
		if j.V == 1 {
			if c.Len != 0 {
				return nil, fmt.Errorf("manifest version 1, chunk %d: a length", i)
			}
			n = chunkLen(j.Size, j.ChunkSize, i)
		} else if n <= 0 || n > maxChunkSize || n > j.Size-end {
			return nil, fmt.Errorf("manifest chunk %d: length %d at %d of a file of %d bytes: want 1 to %d, within the file", i, n, end, j.Size, int64(maxChunkSize))
		}
		if c.Off < 0 || c.Off > math.MaxInt64-n {
			return nil, fmt.Errorf("manifest chunk %d: offset %d out of range", i, c.Off)
		}
		m.Chunks[i] = ChunkRef{Pack: c.Pack, Off: c.Off, Len: n}
		copy(m.Chunks[i].Sum[:], sum)
		end += n
		m.ends[i] = end
	}
	if end != j.Size {
		return nil, fmt.Errorf("manifest of %d bytes: its chunks hold %d", j.Size, end)
	}
	if j.Snap != nil {
		sn, err := decodeSnap(j.Snap)
		if err != nil {
			return nil, fmt.Errorf("manifest snapshot record: %w", err)
		}
		m.Snap = sn
	}
	if j.Lineage != nil {
		if j.V < 2 {
			return nil, fmt.Errorf("manifest version 1 with a lineage record")
		}
		l, err := decodeLineage(j.Lineage)
		if err != nil {
			return nil, fmt.Errorf("manifest lineage record: %w", err)
		}
		m.Lineage = l
	}
	return m, nil
}

// memBytes estimates the memory m holds, for the bounds of what a host
// keeps (Pool.remember).
func (m *Manifest) memBytes() int64 {
	n := int64(len(m.Chunks))*(int64(unsafe.Sizeof(ChunkRef{}))+64+8) + 256
	if m.Snap != nil {
		n += int64(len(m.Snap.Keys)) * 32
	}
	if m.Lineage != nil {
		n += int64(len(m.Lineage.Keys)) * 32
	}
	return n
}

// index computes the chunks' end offsets of a manifest made here.
func (m *Manifest) index() {
	m.ends = make([]int64, len(m.Chunks))
	var end int64
	for i, c := range m.Chunks {
		end += c.Len
		m.ends[i] = end
	}
}

// chunkAt returns the index of the chunk holding file offset off (0 <=
// off < Size), and the chunk's start.
func (m *Manifest) chunkAt(off int64) (int, int64) {
	i := sort.Search(len(m.ends), func(i int) bool { return m.ends[i] > off })
	if i == 0 {
		return 0, 0
	}
	return i, m.ends[i-1]
}

// lineageFingerprint roots a lineage's chain keys apart from prefix
// lookup's (docs/PREFIX.md), which are rooted at the engine's model.
const lineageFingerprint = "kvfs-lineage"

// lineageKeys are the chain keys of tokens under layout key layout.
func lineageKeys(layout string, tokens []uint32) [][32]byte {
	keys := mlx.ChainKeys(layout, lineageFingerprint, "", tokens)
	out := make([][32]byte, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

// maxKindLen bounds a lineage's kind (store.Lineage.Kind: a short word).
const maxKindLen = 32

// maxLineageTokens bounds a lineage's tokens: a store indexes no file of
// more (store.DefaultMaxSnapshotTokens; store.Cut cuts such a file as
// plain bytes, with no lineage), and each host keeps every lineage it
// learns in memory: a record of 2^26 tokens' keys was 8 MiB.
const maxLineageTokens = store.DefaultMaxSnapshotTokens

func decodeLineage(j *lineageJSON) (*LineageInfo, error) {
	switch {
	case j.Layout == "" || len(j.Layout) > maxSnapString:
		return nil, fmt.Errorf("a layout key of %d bytes: want 1 to %d", len(j.Layout), maxSnapString)
	case len(j.Kind) > maxKindLen:
		return nil, fmt.Errorf("a kind of %d bytes: over the limit of %d", len(j.Kind), maxKindLen)
	case j.Tokens < 0 || j.Tokens > maxLineageTokens:
		return nil, fmt.Errorf("%d tokens: want 0 to %d", j.Tokens, maxLineageTokens)
	case int64(len(j.Keys)) != j.Tokens/groupTokens+1:
		return nil, fmt.Errorf("%d chain keys for %d tokens, want %d", len(j.Keys), j.Tokens, j.Tokens/groupTokens+1)
	}
	l := &LineageInfo{Kind: j.Kind, Layout: j.Layout, Tokens: j.Tokens, Keys: make([][32]byte, len(j.Keys))}
	for i, k := range j.Keys {
		if !isHash(k) {
			return nil, fmt.Errorf("chain key %d: %q is not a sha256", i, k)
		}
		hex.Decode(l.Keys[i][:], []byte(k))
	}
	return l, nil
}

// checkSnap applies a manifest's limits to a snapshot record with
// nKeys chain keys: the same for a record read and one about to be
// written.
func checkSnap(model, fingerprint, ns string, tokens, minReusable int64, nKeys int) error {
	for _, s := range []string{model, fingerprint, ns} {
		if len(s) > maxSnapString {
			return fmt.Errorf("a string of %d bytes: over the limit of %d", len(s), maxSnapString)
		}
	}
	if tokens < 0 || tokens > maxSnapTokens {
		return fmt.Errorf("%d tokens: want 0 to %d", tokens, maxSnapTokens)
	}
	if minReusable < 0 || minReusable > tokens {
		return fmt.Errorf("minimum reusable offset %d of %d tokens", minReusable, tokens)
	}
	if want := tokens/groupTokens + 1; int64(nKeys) != want {
		return fmt.Errorf("%d chain keys for %d tokens, want %d", nKeys, tokens, want)
	}
	return nil
}

func decodeSnap(j *snapJSON) (*SnapInfo, error) {
	if err := checkSnap(j.Model, j.Fingerprint, j.NS, j.Tokens, j.MinReusable, len(j.Keys)); err != nil {
		return nil, err
	}
	sn := &SnapInfo{Model: j.Model, Fingerprint: j.Fingerprint, NS: j.NS, Tokens: j.Tokens,
		MinReusable: j.MinReusable, Trimmable: j.Trimmable, Keys: make([][32]byte, len(j.Keys))}
	for i, k := range j.Keys {
		if !isHash(k) {
			return nil, fmt.Errorf("chain key %d: %q is not a sha256", i, k)
		}
		hex.Decode(sn.Keys[i][:], []byte(k))
	}
	return sn, nil
}

// isHash reports whether s is a sha256 in lower-case hex, as object names
// are.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// errCorrupt marks bytes that do not hash to their name.
var errCorrupt = errors.New("bytes do not match their sha256")

// errNotManifest marks a name whose value cannot name a manifest.
var errNotManifest = errors.New("not a manifest")

// unreadable reports whether err says that a name's manifest can never
// be read, by this host or any other: its value names no manifest, or
// the object under it does not hash to its name. Such a name reaches
// nothing a reader could get, so the collector, the evictor and the
// repacker pass over it (logged) instead of failing on it for good. A
// manifest this kvfs cannot parse is not such a one: a newer kvfs may.
func unreadable(err error) bool {
	return errors.Is(err, errCorrupt) || errors.Is(err, errNotManifest)
}
