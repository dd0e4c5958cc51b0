package mlx

import (
	"math/rand/v2"
	"testing"
)

func seq(n int, f func(i int) byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f(i)
	}
	return b
}

// hashVectors are every vector of FORMAT.md §3, computed by Bun 1.4.4.
var hashVectors = []struct {
	name string
	in   []byte
	seed uint64
	want uint64
}{
	{"empty", nil, 0, 290873116282709081},
	{"a", []byte("a"), 0, 2941419223392617777},
	{"abc", []byte("abc"), 0, 190542993387777138},
	{"magic", []byte("MLXBUNKV2\n"), 0, 2274243532582674628},
	{"0..99", seq(100, func(i int) byte { return byte(i) }), 0, 2896508052528215303},
	{"1MiB i%251", seq(1<<20, func(i int) byte { return byte(i % 251) }), 0, 5870687537009917395},
	{"abc seed 1", []byte("abc"), 1, 0xdbe5b1e5823255b7},
	{"0..16", seq(17, func(i int) byte { return byte(i) }), 0, 0x7ed011944b0c00ad},
	{"0..47", seq(48, func(i int) byte { return byte(i) }), 0, 0xce6cc055c4aa2354},
	{"0..48", seq(49, func(i int) byte { return byte(i) }), 0, 0xdd118c769fb13542},
	{"0..95", seq(96, func(i int) byte { return byte(i) }), 0, 0x4acbe2a4e0e44872},
	{"0..96", seq(97, func(i int) byte { return byte(i) }), 0, 0xad119c0496db2624},
	// "0..16" and the like are inclusive ranges: 17, 48, 49, 96 and 97
	// bytes, the lengths around the 16- and 48-byte lane boundaries. The
	// lengths in between (16, 47, 95) are covered by TestHasherSplits.
}

func TestHashVectors(t *testing.T) {
	for _, v := range hashVectors {
		if got := HashSeed(v.in, v.seed); got != v.want {
			t.Errorf("%s: HashSeed = %016x, want %016x", v.name, got, v.want)
		}
		if v.seed != 0 {
			continue
		}
		if got := Hash(v.in); got != v.want {
			t.Errorf("%s: Hash = %016x, want %016x", v.name, got, v.want)
		}
		h := NewHasher()
		h.Write(v.in)
		if got := h.Sum64(); got != v.want {
			t.Errorf("%s: Hasher = %016x, want %016x", v.name, got, v.want)
		}
	}
}

func TestHashHex(t *testing.T) {
	if got := HashHex(Hash([]byte("abc"))); got != "02a4f1d7cb516c72" {
		t.Fatalf("HashHex(abc) = %q", got)
	}
}

// TestHasherSplits checks that the streaming hasher equals the one-shot hash
// for every length up to 300 and for random ways of splitting the input,
// which exercises the buffer carry-over at every 48- and 16-byte boundary.
func TestHasherSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 400)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 300; n++ {
		want := Hash(data[:n])
		for trial := 0; trial < 20; trial++ {
			h := NewHasher()
			rest := data[:n]
			for len(rest) > 0 {
				k := rng.IntN(len(rest)+1) % 97
				if trial == 0 {
					k = 1
				}
				h.Write(rest[:k])
				rest = rest[k:]
			}
			if got := h.Sum64(); got != want {
				t.Fatalf("len %d trial %d: streaming %016x, one-shot %016x", n, trial, got, want)
			}
		}
	}
}

func BenchmarkHash(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		Hash(buf)
	}
}
