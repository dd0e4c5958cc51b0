// Package llamastatetest writes state files in llama.cpp's layout, for
// tests: a growing conversation whose cells' K and V depend only on the
// tokens up to them, as a model's do. It follows llama.cpp's writer
// (state_seq_save_file, llama_kv_cache::state_write), not
// llamastate.Parse, so that the two check each other.
package llamastatetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
)

// Spec is the shape of a file.
type Spec struct {
	Session   bool   // "ggsn" (with Arch) rather than "ggsq"
	Arch      string // session files: the architecture's name
	Layers    int
	KRow      int  // K bytes per cell and layer (also V's, FlashAttn)
	FlashAttn bool // V token-major; otherwise transposed
	VEl       int  // transposed V: bytes per element
	VChannels int  // transposed V: n_embd_v_gqa
	Ext       bool // cells carry 12 bytes of 2D position
	Caches    int  // 0 or 1: one cache; 2: a base and an SWA cache
	Seed      byte // makes different models' bytes differ
}

// cellBytes returns n bytes that depend on the seed, the tokens up to and
// including cell i's (through chain), the cache, layer and what: one
// sha256 seeds a generator that fills them, so that files of real models'
// sizes are quick to make.
func (s Spec) cellBytes(chain [32]byte, cache, layer int, what byte, n int) []byte {
	h := sha256.Sum256(append(chain[:], s.Seed, byte(cache), byte(layer), byte(layer>>8), what))
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(h[:]), binary.LittleEndian.Uint64(h[8:])))
	out := make([]byte, n+8)
	for k := 0; k < n; k += 8 {
		binary.LittleEndian.PutUint64(out[k:], r.Uint64())
	}
	return out[:n]
}

// Write returns the file of a sequence whose cells hold tokens.
func Write(s Spec, tokens []uint32) []byte {
	var b bytes.Buffer
	u32 := func(v uint32) { binary.Write(&b, binary.LittleEndian, v) }
	u64 := func(v uint64) { binary.Write(&b, binary.LittleEndian, v) }
	if s.Session {
		u32(0x6767736e)
		u32(10)
	} else {
		u32(0x67677371)
		u32(3)
	}
	u32(uint32(len(tokens)))
	for _, t := range tokens {
		u32(t)
	}
	if s.Session {
		u32(uint32(len(s.Arch)))
		b.WriteString(s.Arch)
	}
	chains := make([][32]byte, len(tokens))
	var c [32]byte
	for i, t := range tokens {
		c = sha256.Sum256(append(c[:], byte(t), byte(t>>8), byte(t>>16), byte(t>>24)))
		chains[i] = c
	}
	caches := max(s.Caches, 1)
	for cache := range caches {
		u32(1) // n_stream
		u32(uint32(len(tokens)))
		if len(tokens) == 0 {
			continue
		}
		for i := range tokens {
			u32(uint32(i)) // pos
			u32(1)         // n_seq_id
			if s.Ext {
				u32(uint32(i))
				u32(0)
				u32(tokens[i])
			}
			u32(0) // seq_id
		}
		vt := uint32(1)
		if s.FlashAttn {
			vt = 0
		}
		u32(vt)
		u32(uint32(s.Layers))
		for l := range s.Layers {
			u32(1) // GGML_TYPE_F16
			u64(uint64(s.KRow))
			for i := range tokens {
				b.Write(s.cellBytes(chains[i], cache, l, 'k', s.KRow))
			}
		}
		for l := range s.Layers {
			if s.FlashAttn {
				u32(1)
				u64(uint64(s.KRow))
				for i := range tokens {
					b.Write(s.cellBytes(chains[i], cache, l, 'v', s.KRow))
				}
				continue
			}
			u32(1)
			u32(uint32(s.VEl))
			u32(uint32(s.VChannels))
			vals := make([][]byte, len(tokens))
			for i := range tokens {
				vals[i] = s.cellBytes(chains[i], cache, l, 'v', s.VEl*s.VChannels)
			}
			for j := range s.VChannels {
				for i := range tokens {
					b.Write(vals[i][j*s.VEl : (j+1)*s.VEl])
				}
			}
		}
	}
	return b.Bytes()
}
