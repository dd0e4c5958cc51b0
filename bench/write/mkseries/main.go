// Command mkseries writes a prefix-growth series of KV-cache snapshots
// for bench/write: whole-layout .mlxkv files of FROM, FROM+STEP, … TO
// tokens of one conversation, each token list extending the last, so that
// every snapshot holds the previous one's rows (internal/snapgen: a
// token's keys and values depend only on the tokens up to it) and new rows
// after them, as an engine saving a growing conversation writes them.
//
//	mkseries -layers 32 -heads 8 -headdim 128 -from 8192 -to 32768 -step 4096 DIR
//
// It writes DIR/series-TTTTTT.mlxkv for each size T and prints their paths.
// With -format llama (or llama-fa), it writes llama.cpp sequence state
// files of the same shape instead (llamastatetest: V transposed, as
// llama.cpp saves it with flash attention off; token-major with -fa),
// DIR/series-TTTTTT.state.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/mlx"
)

func main() {
	layers := flag.Int("layers", 32, "kv layers")
	heads := flag.Int("heads", 8, "KV heads")
	headDim := flag.Int("headdim", 128, "head dimension")
	from := flag.Int("from", 8192, "tokens of the first snapshot")
	to := flag.Int("to", 32768, "tokens of the last snapshot")
	step := flag.Int("step", 4096, "tokens added by each snapshot")
	seed := flag.Uint64("seed", 1, "the conversation's seed")
	format := flag.String("format", "mlxkv", "mlxkv, llama (llama.cpp's sequence state, V transposed) or llama-fa (flash attention on: V token-major)")
	flag.Parse()
	if *format != "mlxkv" && *format != "llama" && *format != "llama-fa" {
		fmt.Fprintf(os.Stderr, "mkseries: unknown -format %q\n", *format)
		os.Exit(2)
	}
	if flag.NArg() != 1 || *from <= 0 || *step <= 0 || *to < *from || *layers <= 0 || *heads <= 0 || *headDim <= 0 || *headDim%4 != 0 {
		fmt.Fprintln(os.Stderr, "usage: mkseries [-layers L -heads H -headdim D -from T0 -to T1 -step S -seed N] DIR")
		os.Exit(2)
	}
	dir := flag.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "mkseries: %v\n", err)
		os.Exit(1)
	}
	m := snapgen.Model{ID: "bench/write", Layers: *layers, KVHeads: *heads, HeadDim: *headDim, DType: mlx.BFloat16}
	tokens := snapgen.Tokens(*from, *seed)
	for k := 0; ; k++ {
		path := filepath.Join(dir, fmt.Sprintf("series-%06d.mlxkv", len(tokens)))
		var err error
		if *format == "mlxkv" {
			err = m.WriteFile(path, tokens)
		} else {
			path = filepath.Join(dir, fmt.Sprintf("series-%06d.state", len(tokens)))
			spec := llamastatetest.Spec{Layers: *layers, KRow: *heads * *headDim * 2, FlashAttn: *format == "llama-fa",
				VEl: 2, VChannels: *heads * *headDim}
			err = os.WriteFile(path, llamastatetest.Write(spec, tokens), 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "mkseries: write %s: %v\n", path, err)
			os.Exit(1)
		}
		fmt.Println(path)
		if len(tokens)+*step > *to {
			break
		}
		tokens = snapgen.Extend(tokens, *step, *seed+uint64(k)+1)
	}
}
