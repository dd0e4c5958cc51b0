//go:build linux

package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// llama4 is Llama-3-8B's cache geometry (8 KV heads of 128, bf16) with 4
// of its 32 layers: 16 KiB per token, so that 12,000 tokens are 192 MiB
// rather than 1.5 GiB (the tests write them twice and read them back
// several times on shared CI machines). Trimming cuts every layer alike,
// so the layer count changes only the volume.
var llama4 = snapgen.Model{ID: snapgen.Llama3_8B.ID, Layers: 4, KVHeads: 8, HeadDim: 128, DType: mlx.BFloat16}

// prefixModels are the models the prefix-view clients write, by name.
var prefixModels = map[string]snapgen.Model{"llama4": llama4, "tiny": snapgen.Tiny}

func init() {
	// prefixwrite MODEL LAYOUT PATH TOKENS SEED: write a snapshot of
	// TOKENS tokens drawn from SEED with the mlx Writer, as the engine
	// does: PATH, and for the blocks layout blocks/ beside it.
	clients["prefixwrite"] = func(args []string) error {
		m := prefixModels[args[0]]
		n, _ := strconv.Atoi(args[3])
		seed, _ := strconv.ParseUint(args[4], 10, 64)
		h, tensors := m.Snapshot(snapgen.Tokens(n, seed))
		w := &mlx.Writer{}
		if args[1] == "blocks" {
			w.Layout = mlx.BlocksLayout
		}
		_, _, err := w.Write(args[2], h, tensors)
		return err
	}
	// prefixreadloop VIEW SECONDS REF...: open VIEW, fstat it and read it
	// whole, again and again for SECONDS; each read must be one of the
	// REFs, whole. Prints the number of reads.
	clients["prefixreadloop"] = func(args []string) error {
		secs, _ := strconv.ParseFloat(args[1], 64)
		var refs [][]byte
		for _, p := range args[2:] {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			refs = append(refs, b)
		}
		reads := 0
		for end := time.Now().Add(time.Duration(secs * float64(time.Second))); time.Now().Before(end); reads++ {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("read %d: %w", reads, err)
			}
			ok := false
			for _, r := range refs {
				ok = ok || bytes.Equal(b, r)
			}
			if !ok {
				return fmt.Errorf("read %d of %s: %d bytes, none of the versions", reads, args[0], len(b))
			}
		}
		fmt.Println(reads)
		return nil
	}
	// prefixcheck VIEW REF: mmap VIEW and compare it byte for byte with
	// REF, then check that it parses as a whole-layout snapshot whose
	// every tensor matches its recorded hash.
	clients["prefixcheck"] = func(args []string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		want, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		if fi.Size() != int64(len(want)) {
			return fmt.Errorf("%s: %d bytes, want %d", args[0], fi.Size(), len(want))
		}
		got, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("mmap %s: %w", args[0], err)
		}
		defer syscall.Munmap(got)
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && got[i] == want[i] {
				i++
			}
			return fmt.Errorf("%s differs from %s at byte %d", args[0], args[1], i)
		}
		r := bytes.NewReader(got)
		s, err := mlx.Parse(r, int64(len(got)), args[0])
		if err != nil {
			return err
		}
		if s.Blocks() {
			return fmt.Errorf("%s: a blocks-layout view", args[0])
		}
		return s.Verify(context.Background(), r, mlx.BlockDir(filepath.Dir(args[0])))
	}
}
