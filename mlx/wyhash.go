package mlx

import (
	"encoding/binary"
	"math/bits"
)

// The engine hashes headers and tensors with Bun.hash, which is Zig's
// std.hash.Wyhash with seed 0: the "final" wyhash with three 48-byte lanes and
// the legacy secrets (FORMAT.md §3). It is not the C wyhash.h v4, whose secrets
// differ, so no general-purpose Go wyhash package can stand in for it.

var wySecret = [4]uint64{0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3, 0x589965cc75374cc3}

func wyMum(a, b uint64) (lo, hi uint64) {
	hi, lo = bits.Mul64(a, b)
	return lo, hi
}

func wyMix(a, b uint64) uint64 {
	lo, hi := wyMum(a, b)
	return lo ^ hi
}

func r64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
func r32(b []byte) uint64 { return uint64(binary.LittleEndian.Uint32(b)) }

// Hash returns Bun.hash(b): Zig's Wyhash of b with seed 0.
func Hash(b []byte) uint64 { return HashSeed(b, 0) }

// HashSeed returns Zig's Wyhash of b with the given seed.
func HashSeed(b []byte, seed uint64) uint64 {
	s0 := seed ^ wyMix(seed^wySecret[0], wySecret[1])
	s1, s2 := s0, s0
	n := len(b)
	var a, c uint64
	if n <= 16 {
		a, c = wySmall(b)
	} else {
		i := 0
		if n >= 48 {
			for ; i+48 < n; i += 48 {
				s0 = wyMix(r64(b[i:])^wySecret[1], r64(b[i+8:])^s0)
				s1 = wyMix(r64(b[i+16:])^wySecret[2], r64(b[i+24:])^s1)
				s2 = wyMix(r64(b[i+32:])^wySecret[3], r64(b[i+40:])^s2)
			}
			s0 ^= s1 ^ s2
		}
		for ; i+16 < n; i += 16 {
			s0 = wyMix(r64(b[i:])^wySecret[1], r64(b[i+8:])^s0)
		}
		a, c = r64(b[n-16:]), r64(b[n-8:])
	}
	return wyFinish(a, c, s0, uint64(n))
}

func wySmall(b []byte) (a, c uint64) {
	n := len(b)
	switch {
	case n >= 4:
		q := (n >> 3) << 2
		a = r32(b)<<32 | r32(b[q:])
		c = r32(b[n-4:])<<32 | r32(b[n-4-q:])
	case n > 0:
		a = uint64(b[0])<<16 | uint64(b[n>>1])<<8 | uint64(b[n-1])
	}
	return a, c
}

func wyFinish(a, b, s0, n uint64) uint64 {
	a, b = wyMum(a^wySecret[1], b^s0)
	return wyMix(a^wySecret[0]^n, b^wySecret[1])
}

// Hasher computes Bun.hash over a stream, so that a tensor can be verified
// while it is read instead of after it is gathered in memory. Its result for
// any sequence of writes equals Hash of their concatenation. The zero value is
// not ready for use; call NewHasher.
type Hasher struct {
	seed   uint64
	state  [3]uint64
	total  uint64
	buf    [48]byte
	bufLen int
}

// NewHasher returns a streaming Bun.hash with seed 0.
func NewHasher() *Hasher {
	h := &Hasher{}
	h.Reset()
	return h
}

// Reset returns h to its initial state.
func (h *Hasher) Reset() {
	s := h.seed ^ wyMix(h.seed^wySecret[0], wySecret[1])
	*h = Hasher{seed: h.seed, state: [3]uint64{s, s, s}}
}

func (h *Hasher) round(b []byte) {
	h.state[0] = wyMix(r64(b[0:])^wySecret[1], r64(b[8:])^h.state[0])
	h.state[1] = wyMix(r64(b[16:])^wySecret[2], r64(b[24:])^h.state[1])
	h.state[2] = wyMix(r64(b[32:])^wySecret[3], r64(b[40:])^h.state[2])
}

// Write adds p to the hash. It never fails.
func (h *Hasher) Write(p []byte) (int, error) {
	n := len(p)
	h.total += uint64(n)
	if n <= 48-h.bufLen {
		copy(h.buf[h.bufLen:], p)
		h.bufLen += n
		return n, nil
	}
	i := 0
	if h.bufLen > 0 {
		i = 48 - h.bufLen
		copy(h.buf[h.bufLen:], p[:i])
		h.round(h.buf[:])
		h.bufLen = 0
	}
	for ; i+48 < n; i += 48 {
		h.round(p[i : i+48])
	}
	rest := p[i:]
	// Keep the 16 bytes before a short tail: the finish reads the last 16
	// bytes of the whole input, which may lie in an already consumed round.
	if len(rest) < 16 && i >= 48 {
		k := 16 - len(rest)
		copy(h.buf[48-k:], p[i-k:i])
	}
	copy(h.buf[:], rest)
	h.bufLen = len(rest)
	return n, nil
}

// Sum64 returns the hash of everything written so far. It does not change h.
func (h *Hasher) Sum64() uint64 {
	if h.total <= 16 {
		a, b := wySmall(h.buf[:h.bufLen])
		return wyFinish(a, b, h.state[0], h.total)
	}
	in := h.buf[:h.bufLen]
	if h.bufLen < 16 {
		var scratch [16]byte
		k := 16 - h.bufLen
		copy(scratch[:k], h.buf[48-k:])
		copy(scratch[k:], h.buf[:h.bufLen])
		in = scratch[:]
		// Every byte of scratch is already consumed except the tail, so
		// the 16-byte loop below must not run: it only needs a and b.
		s0 := h.state[0] ^ h.state[1] ^ h.state[2]
		return wyFinish(r64(in[0:]), r64(in[8:]), s0, h.total)
	}
	s0 := h.state[0] ^ h.state[1] ^ h.state[2]
	i := 0
	for ; i+16 < len(in); i += 16 {
		s0 = wyMix(r64(in[i:])^wySecret[1], r64(in[i+8:])^s0)
	}
	return wyFinish(r64(in[len(in)-16:]), r64(in[len(in)-8:]), s0, h.total)
}

// HashHex formats a tensor hash as the engine stores it in a v3+ header:
// sixteen lowercase hex digits, zero-padded.
func HashHex(h uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&15]
		h >>= 4
	}
	return string(b[:])
}
