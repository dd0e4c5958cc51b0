package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
// its chunks lies. Every chunk but the last is ChunkSize long.
type Manifest struct {
	Size      int64
	ChunkSize int64
	Chunks    []ChunkRef
	// Snap describes a file that parsed as a snapshot when it was
	// published (match.go); nil for any other file.
	Snap *SnapInfo
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
	V         int         `json:"v"`
	Size      int64       `json:"size"`
	ChunkSize int64       `json:"chunk_size"`
	Chunks    []chunkJSON `json:"chunks"`
	Snap      *snapJSON   `json:"snap,omitempty"`
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
}

// Encode is the manifest's object bytes and the name they go under.
func (m *Manifest) Encode() (name string, b []byte, err error) {
	j := manifestJSON{V: 1, Size: m.Size, ChunkSize: m.ChunkSize, Chunks: make([]chunkJSON, len(m.Chunks))}
	for i, c := range m.Chunks {
		j.Chunks[i] = chunkJSON{Sum: hex.EncodeToString(c.Sum[:]), Pack: c.Pack, Off: c.Off}
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
	if j.V != 1 {
		return nil, fmt.Errorf("manifest version %d: this kvfs reads version 1", j.V)
	}
	if j.ChunkSize < minChunkSize || j.ChunkSize > maxChunkSize {
		return nil, fmt.Errorf("manifest chunk size %d: want %d to %d", j.ChunkSize, minChunkSize, maxChunkSize)
	}
	if j.Size < 0 || j.Size > maxFileSize {
		return nil, fmt.Errorf("manifest size %d: want 0 to %d", j.Size, int64(maxFileSize))
	}
	want := (j.Size + j.ChunkSize - 1) / j.ChunkSize
	if int64(len(j.Chunks)) != want {
		return nil, fmt.Errorf("manifest of %d bytes lists %d chunks of %d, want %d", j.Size, len(j.Chunks), j.ChunkSize, want)
	}
	m := &Manifest{Size: j.Size, ChunkSize: j.ChunkSize, Chunks: make([]ChunkRef, len(j.Chunks))}
	for i, c := range j.Chunks {
		sum, err := hex.DecodeString(c.Sum)
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("manifest chunk %d: sum %q is not a sha256", i, c.Sum)
		}
		if !isHash(c.Pack) {
			return nil, fmt.Errorf("manifest chunk %d: pack %q is not a sha256", i, c.Pack)
		}
		n := chunkLen(j.Size, j.ChunkSize, i)
		if c.Off < 0 || c.Off > math.MaxInt64-n {
			return nil, fmt.Errorf("manifest chunk %d: offset %d out of range", i, c.Off)
		}
		m.Chunks[i] = ChunkRef{Pack: c.Pack, Off: c.Off, Len: n}
		copy(m.Chunks[i].Sum[:], sum)
	}
	if j.Snap != nil {
		sn, err := decodeSnap(j.Snap)
		if err != nil {
			return nil, fmt.Errorf("manifest snapshot record: %w", err)
		}
		m.Snap = sn
	}
	return m, nil
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
