// Command mkkv writes a KV-cache snapshot shaped like a model's cache (Layers
// kv entries, each K and V of shape [1, KVHeads, T, HeadDim], bf16) as the
// engine's writer does (mlx.Writer, whole layout), to one or more paths,
// for bench/gpu. The tensor bytes are deterministic: tensor s (K of layer l
// is 2l, V is 2l+1) holds, as little-endian uint32 words, Fill(s, i, seed)
// for word i, which bench/gpu/kvrestore.py regenerates on the GPU to check a
// restore.
//
//	mkkv -layers 32 -heads 8 -headdim 128 -tokens 32768 OUT.mlxkv [MORE.mlxkv ...]
//
// It prints one JSON line: the sizes and the time each write took.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// Fill is word i of tensor s: lowbias32 of i mixed with s and seed.
func Fill(s, i, seed uint32) uint32 {
	x := i ^ (s*0x9e3779b9 + seed*0x85ebca6b)
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

type result struct {
	Layers, KVHeads, HeadDim, Tokens int
	Seed                             uint32
	TensorBytes                      int64 // sum of the tensors' bytes
	GenSeconds                       float64
	Writes                           []write
}

type write struct {
	Path    string
	Size    int64
	Seconds float64
}

func main() {
	layers := flag.Int("layers", 32, "kv layers")
	heads := flag.Int("heads", 8, "KV heads")
	headDim := flag.Int("headdim", 128, "head dimension")
	tokens := flag.Int("tokens", 8192, "tokens")
	seed := flag.Uint("seed", 1, "data seed")
	model := flag.String("model", "bench/gpu", "modelId written in the header")
	flag.Parse()
	if flag.NArg() == 0 || *tokens <= 0 || *layers <= 0 || *heads <= 0 || *headDim <= 0 || *headDim%2 != 0 {
		fmt.Fprintln(os.Stderr, "usage: mkkv [-layers L -heads H -headdim D -tokens T -seed S] OUT.mlxkv...")
		os.Exit(2)
	}
	m := snapgen.Model{ID: *model, Layers: *layers, KVHeads: *heads, HeadDim: *headDim, DType: mlx.BFloat16}
	T := int64(*tokens)
	h := &mlx.Header{
		CreatedAt: 1767225600000, ModelID: m.ID, ConfigFingerprint: m.ID + "-fp", TokenizerHash: "tok",
		CodecProvider: mlx.DefaultCodecProvider, Tokens: snapgen.Tokens(*tokens, uint64(*seed)),
	}
	shape := []int64{1, int64(m.KVHeads), T, int64(m.HeadDim)}
	n := int64(m.KVHeads) * T * int64(m.HeadDim) * 2
	start := time.Now()
	bufs := make([][]byte, 2*m.Layers)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.NumCPU(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				b := make([]byte, n)
				for i := int64(0); i < n/4; i++ {
					binary.LittleEndian.PutUint32(b[4*i:], Fill(uint32(s), uint32(i), uint32(*seed)))
				}
				bufs[s] = b
			}
		}()
	}
	for s := range bufs {
		next <- s
	}
	close(next)
	wg.Wait()
	res := result{Layers: m.Layers, KVHeads: m.KVHeads, HeadDim: m.HeadDim, Tokens: *tokens, Seed: uint32(*seed),
		TensorBytes: n * int64(len(bufs)), GenSeconds: time.Since(start).Seconds()}
	var tensors []mlx.Tensor
	for l := 0; l < m.Layers; l++ {
		e := mlx.CacheEntry{Kind: mlx.KindKV, Offset: T}
		for kv := 0; kv < 2; kv++ {
			tensors = append(tensors, mlx.Contiguous(bufs[2*l+kv], m.DType, shape...))
			e.Tensors = append(e.Tensors, mlx.Slot{Shape: shape, DType: m.DType})
		}
		h.Caches = append(h.Caches, e)
	}
	for _, path := range flag.Args() {
		t0 := time.Now()
		if _, _, err := (&mlx.Writer{}).Write(path, h, tensors); err != nil {
			fmt.Fprintln(os.Stderr, "mkkv:", err)
			os.Exit(1)
		}
		fi, err := os.Stat(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkkv:", err)
			os.Exit(1)
		}
		res.Writes = append(res.Writes, write{Path: path, Size: fi.Size(), Seconds: time.Since(t0).Seconds()})
	}
	js, _ := json.Marshal(res)
	fmt.Println(string(js))
}
