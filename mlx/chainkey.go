package mlx

import (
	"crypto/sha256"
	"encoding/binary"
)

// GroupTokens is the number of tokens a chain key step covers
// (docs/PREFIX.md): keys exist only for whole groups, so that any engine
// can compute the same keys for a prompt without knowing which snapshot
// lengths exist.
const GroupTokens = 256

// chainDomain separates chain keys from every other sha256 in kvfs, and
// versions the scheme.
const chainDomain = "kvfs-prefix-v1\x00"

// ChainKey is one token-chain key: h(k) names the first k*GroupTokens
// tokens of a prompt for one model, config fingerprint and namespace.
type ChainKey [sha256.Size]byte

// ChainRoot is h0 = sha256("kvfs-prefix-v1\x00" + modelId + "\x00" +
// configFingerprint + "\x00" + ns): the key of the empty prefix.
func ChainRoot(modelID, configFingerprint, ns string) ChainKey {
	h := sha256.New()
	h.Write([]byte(chainDomain))
	h.Write([]byte(modelID))
	h.Write([]byte{0})
	h.Write([]byte(configFingerprint))
	h.Write([]byte{0})
	h.Write([]byte(ns))
	var k ChainKey
	h.Sum(k[:0])
	return k
}

// ChainNext is h(k+1) = sha256(h(k) || group as little-endian u32).
func ChainNext(prev ChainKey, group []uint32) ChainKey {
	b := make([]byte, 0, len(prev)+4*len(group))
	b = append(b, prev[:]...)
	for _, t := range group {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return sha256.Sum256(b)
}

// ChainKeys returns h(0) … h(floor(len(tokens)/GroupTokens)): index k is
// the key of the first k groups. A trailing partial group has no key.
func ChainKeys(modelID, configFingerprint, ns string, tokens []uint32) []ChainKey {
	n := len(tokens) / GroupTokens
	out := make([]ChainKey, 1, n+1)
	out[0] = ChainRoot(modelID, configFingerprint, ns)
	for k := 0; k < n; k++ {
		out = append(out, ChainNext(out[k], tokens[k*GroupTokens:(k+1)*GroupTokens]))
	}
	return out
}

// ModelKey names a (modelId, configFingerprint) pair in any namespace:
// lookups use it only to tell a miss for want of any snapshot of the
// model from one for want of a snapshot in the namespace asked.
func ModelKey(modelID, configFingerprint string) ChainKey {
	return sha256.Sum256([]byte("kvfs-prefix-model-v1\x00" + modelID + "\x00" + configFingerprint))
}

// Trimmable is the engine's headerTrimmable for a whole snapshot
// (FORMAT.md §5.2, §7): whether it may seed a prefix shorter than its own
// token list. It asks Trim itself, at the shortest length the snapshot
// allows, so that what lookups promise is what the trimmer can deliver.
func Trimmable(h *Header) bool {
	var n int64
	for i := range h.Caches {
		n = max(n, h.Caches[i].MinReusable())
	}
	if n >= int64(len(h.Tokens)) {
		// Reusable at full length only: there is nothing shorter to trim to.
		return false
	}
	_, err := Trim(h, n)
	return err == nil
}

// MinReusable is the snapshot's minimumReusableOffset: the maximum over its
// caches (FORMAT.md §5.2).
func MinReusable(h *Header) int64 {
	var n int64
	for i := range h.Caches {
		n = max(n, h.Caches[i].MinReusable())
	}
	return n
}
