// Package safetensorstest writes prompt caches in mlx-lm's layout, for
// tests (MLX itself does not run here): save_prompt_cache of a list of
// KVCache, one per layer, whose state is (keys, values), each [B, H, T, D]
// (models/cache.py), written as mx.save_safetensors does: a header whose
// keys are sorted, with the cache metadata flattened as tree_flatten
// does, then the tensors' bytes in an order of their own (the data is
// located by data_offsets, not by the header's order).
package safetensorstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Spec is the shape of a prompt cache.
type Spec struct {
	Layers, Heads, HeadDim int
	Seed                   byte
}

type entry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// PromptCache returns the file of a cache holding tokens: bf16 keys and
// values whose bytes for a token depend only on the tokens up to it.
func PromptCache(s Spec, tokens []uint32) []byte {
	T := len(tokens)
	chains := make([][32]byte, T)
	var c [32]byte
	for i, t := range tokens {
		c = sha256.Sum256(binary.LittleEndian.AppendUint32(c[:], t))
		chains[i] = c
	}
	rowBytes := T * s.HeadDim * 2
	tensor := func(layer, kv int) []byte {
		out := make([]byte, 0, s.Heads*rowBytes)
		for h := range s.Heads {
			for i := range T {
				var v []byte
				for k := 0; len(v) < s.HeadDim*2; k++ {
					sum := sha256.Sum256(append(chains[i][:], s.Seed, byte(layer), byte(kv), byte(h), byte(k)))
					v = append(v, sum[:]...)
				}
				out = append(out, v[:s.HeadDim*2]...)
			}
		}
		return out
	}
	header := map[string]any{}
	meta := map[string]string{}
	var data bytes.Buffer
	// The data in reverse order of the layers, keys after values.
	for l := s.Layers - 1; l >= 0; l-- {
		for _, kv := range []int{1, 0} {
			b := tensor(l, kv)
			off := int64(data.Len())
			data.Write(b)
			header[fmt.Sprintf("%d.%d", l, kv)] = entry{DType: "BF16", Shape: []int64{1, int64(s.Heads), int64(T), int64(s.HeadDim)},
				DataOffsets: [2]int64{off, off + int64(len(b))}}
		}
		meta[fmt.Sprintf("0.%d", l)] = "" // the KVCache's meta_state
		meta[fmt.Sprintf("2.%d", l)] = "KVCache"
	}
	meta["1.model"] = "kvfs-test"
	header["__metadata__"] = meta
	h, err := json.Marshal(header) // keys sorted, as nlohmann's json dumps them
	if err != nil {
		panic(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(out, h...)
	return append(out, data.Bytes()...)
}
