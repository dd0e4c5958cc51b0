//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// The clients of BenchmarkHeaderScan (bench_headers_test.go): one writes
// the snapshots into both directories, the other is the engine's start-up
// scan of one namespace directory, timed in its own process.
func init() {
	clients["hs-write"] = hsWriteClient
	clients["hs-scan"] = hsScanClient
}

// hsModel has the cache list of a 32-layer model (32 kv entries of K and V,
// so a header of realistic length: 64 tensors with their hashes, plus the
// tokens) with tensors shrunk to 4 KiB per token, so that 1,000 snapshots
// of a few hundred tokens are about 1.3 GB per directory rather than the
// 40 GB Llama-3-8B's cache would take.
var hsModel = snapgen.Model{ID: "bench/headers", Layers: 32, KVHeads: 1, HeadDim: 32, DType: mlx.BFloat16}

// hsTokens is the token list of snapshot i: conversations of 10 snapshots
// each, growing by 30 tokens from 200 to 470, so that the snapshots of a
// conversation share their prefixes (as the engine's SSD tier holds them),
// and every conversation opens with the same 128-token system prompt.
func hsTokens(i int, seed uint64) []uint32 {
	conv := snapgen.Extend(snapgen.Tokens(128, seed), 400, seed+1000+uint64(i/10))
	return conv[:200+30*(i%10)]
}

// hsWriteClient, client hs-write, N SEED DIR1 DIR2: write snapshots 0..N-1
// (hsTokens, hsModel) in the whole layout with mlx.Writer into DIR1 and
// DIR2 as <i>-<uuid-like>.mlxkv, the engine's names. Prints the seconds
// spent writing into each.
func hsWriteClient(args []string) error {
	n, seed := wbAtoi(args[0]), uint64(wbAtoi(args[1]))
	dirs := args[2:4]
	var spent [2]time.Duration
	for i := range n {
		h, tensors := hsModel.Snapshot(hsTokens(i, seed))
		name := fmt.Sprintf("%08x-0000-4000-8000-%012x.mlxkv", uint32(i*2654435761), i)
		for d, dir := range dirs {
			t0 := time.Now()
			if _, _, err := (&mlx.Writer{}).Write(filepath.Join(dir, name), h, tensors); err != nil {
				return err
			}
			spent[d] += time.Since(t0)
		}
	}
	fmt.Println(spent[0].Seconds(), spent[1].Seconds())
	return nil
}

// hsReadHeader is the engine's readKvHeader (FORMAT.md §4.5) as it issues
// its system calls: open, read the 26-byte prefix at 0, read headerLen
// bytes at 26, close; then the header hash, JSON and version checks. It
// returns the header's hash and token count, and adds the time spent in
// the system calls to *io.
func hsReadHeader(path string, io *time.Duration) (hash uint64, tokens int, err error) {
	t0 := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	var pb [mlx.PrefixLen]byte
	var p mlx.Prefix
	var body []byte
	if _, err = f.ReadAt(pb[:], 0); err == nil {
		if err = p.UnmarshalBinary(pb[:]); err == nil {
			body = make([]byte, p.HeaderLen)
			_, err = f.ReadAt(body, mlx.PrefixLen)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read header of %s: %w", path, err)
	}
	*io += time.Since(t0) // the checks below are not I/O
	if mlx.Hash(body) != p.HeaderHash {
		return 0, 0, fmt.Errorf("read header of %s: %w", path, mlx.ErrHeaderHash)
	}
	var h mlx.Header
	if err := json.Unmarshal(body, &h); err != nil {
		return 0, 0, fmt.Errorf("parse header of %s: %w", path, err)
	}
	if h.FormatVersion < 3 || h.FormatVersion > 5 {
		return 0, 0, fmt.Errorf("header of %s: format version %d", path, h.FormatVersion)
	}
	return p.HeaderHash, len(h.Tokens), nil
}

// hsScan is the engine's start-up scan of one namespace directory
// (FORMAT.md §5.2): list it, and for every *.mlxkv read its header
// (hsReadHeader) and stat it for the index's size and mtime. It returns
// the number of headers, their total token count and the XOR of their
// header hashes, so that two directories' scans can be compared, and the
// time spent in system calls (the rest is checking and parsing headers).
func hsScan(dir string) (files, tokens int, digest uint64, io time.Duration, err error) {
	t0 := time.Now()
	ents, err := os.ReadDir(dir)
	io = time.Since(t0)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".mlxkv") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		h, n, err := hsReadHeader(path, &io)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		t0 := time.Now()
		if _, err := os.Stat(path); err != nil {
			return 0, 0, 0, 0, err
		}
		io += time.Since(t0)
		files, tokens, digest = files+1, tokens+n, digest^h
	}
	return files, tokens, digest, io, nil
}

// hsScanClient, client hs-scan, DIR: one scan of DIR (hsScan). Prints its
// seconds, the number of headers, their token count, the digest and the
// seconds of system calls.
func hsScanClient(args []string) error {
	t0 := time.Now()
	files, tokens, digest, io, err := hsScan(args[0])
	if err != nil {
		return err
	}
	fmt.Println(time.Since(t0).Seconds(), files, tokens, digest, io.Seconds())
	return nil
}
