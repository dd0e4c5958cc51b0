// Package snapgen makes synthetic KV-cache snapshots for tests and
// benchmarks, shaped like real models' caches and with the property that
// matters for deduplication: the keys and values at position t depend only
// on the tokens up to t, as attention's do. Two snapshots whose token lists
// share a prefix therefore share those tokens' bytes in every row, and
// differ after it.
package snapgen

import (
	"encoding/binary"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/kvfs/kvfs/mlx"
)

// Model is the cache geometry of a model: Layers kv entries, each with K
// and V of shape [1, KVHeads, T, HeadDim].
type Model struct {
	ID      string
	Layers  int
	KVHeads int
	HeadDim int
	DType   mlx.DType
}

// Llama3_8B is Llama-3-8B's cache: 32 layers, 8 KV heads of 128, bf16,
// 128 KiB per token (8192 tokens = 1 GiB).
var Llama3_8B = Model{ID: "meta-llama/Meta-Llama-3-8B", Layers: 32, KVHeads: 8, HeadDim: 128, DType: mlx.BFloat16}

// Tiny is a small model for quick tests: 2 layers, 2 heads of 64, bf16,
// 1 KiB per token.
var Tiny = Model{ID: "test/tiny", Layers: 2, KVHeads: 2, HeadDim: 64, DType: mlx.BFloat16}

// BytesPerToken is the cache size of one token.
func (m Model) BytesPerToken() int64 {
	return int64(m.Layers * 2 * m.KVHeads * m.HeadDim * m.DType.Size())
}

// Tokens returns n token ids drawn from seed.
func Tokens(n int, seed uint64) []uint32 {
	out := make([]uint32, n)
	s := seed*0x9e3779b97f4a7c15 + 1
	for i := range out {
		out[i] = uint32(wyrand(&s) % 128000)
	}
	return out
}

// Extend returns base followed by n tokens drawn from seed.
func Extend(base []uint32, n int, seed uint64) []uint32 {
	return append(append([]uint32(nil), base...), Tokens(n, seed)...)
}

func wyrand(s *uint64) uint64 {
	*s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(*s, *s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// Snapshot returns the header and contiguous tensors of a snapshot of
// tokens: ready for mlx.Writer.
func (m Model) Snapshot(tokens []uint32) (*mlx.Header, []mlx.Tensor) {
	T := len(tokens)
	h := &mlx.Header{
		CreatedAt: 1767225600000, ModelID: m.ID, ConfigFingerprint: m.ID + "-fp", TokenizerHash: "tok",
		CodecProvider: mlx.DefaultCodecProvider, Tokens: append([]uint32(nil), tokens...),
	}
	// prefix[t] identifies tokens[0..t]; position t's values derive from it.
	prefix := make([]uint64, T)
	var acc uint64 = 0xcbf29ce484222325
	for t, tk := range tokens {
		acc = (acc ^ uint64(tk)) * 0x100000001b3
		acc ^= acc >> 29
		prefix[t] = acc
	}
	rowBytes := m.HeadDim * m.DType.Size()
	shape := []int64{1, int64(m.KVHeads), int64(T), int64(m.HeadDim)}
	// The tensors are filled on every core (a 32k-token snapshot of an 8B
	// model is 4 GiB): each depends only on prefix and its own salt.
	bufs := make([][]byte, 2*m.Layers)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				l, kv := s/2, s%2
				buf := make([]byte, m.KVHeads*T*rowBytes)
				for hd := 0; hd < m.KVHeads; hd++ {
					salt := uint64(l)<<32 | uint64(kv)<<16 | uint64(hd)
					for t := 0; t < T; t++ {
						s := prefix[t] ^ salt*0x9e3779b97f4a7c15
						row := buf[(hd*T+t)*rowBytes : (hd*T+t+1)*rowBytes]
						for i := 0; i+8 <= len(row); i += 8 {
							binary.LittleEndian.PutUint64(row[i:], wyrand(&s))
						}
					}
				}
				bufs[s] = buf
			}
		}()
	}
	for s := range bufs {
		next <- s
	}
	close(next)
	wg.Wait()
	var tensors []mlx.Tensor
	for l := 0; l < m.Layers; l++ {
		e := mlx.CacheEntry{Kind: mlx.KindKV, Offset: int64(T)}
		for kv := 0; kv < 2; kv++ {
			tensors = append(tensors, mlx.Contiguous(bufs[2*l+kv], m.DType, shape...))
			e.Tensors = append(e.Tensors, mlx.Slot{Shape: shape, DType: m.DType})
		}
		h.Caches = append(h.Caches, e)
	}
	return h, tensors
}

// WriteFile writes a whole-layout snapshot of tokens to path.
func (m Model) WriteFile(path string, tokens []uint32) error {
	h, tensors := m.Snapshot(tokens)
	_, _, err := (&mlx.Writer{}).Write(path, h, tensors)
	return err
}

// Bytes is the whole-layout snapshot of tokens, as WriteFile writes it.
func (m Model) Bytes(tokens []uint32) ([]byte, error) {
	dir, err := os.MkdirTemp("", "snapgen-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.mlxkv")
	if err := m.WriteFile(path, tokens); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}
