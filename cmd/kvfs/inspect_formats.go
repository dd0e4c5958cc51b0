package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/safetensors"
	"github.com/kvfs/kvfs/store"
	"golang.org/x/sys/unix"
)

// Engines other than the one kvfs grew from write their caches in their
// own formats (docs/ENGINES.md); inspect explains each it recognises, by
// its bytes, as the store does, and says how a file on a kvfs mount was
// stored: as what, in how many bytes of its own, and which file it shares
// its rows with.

// otherReport is inspect's report of a file that is not a .mlxkv
// snapshot.
type otherReport struct {
	File        string      `json:"file"`
	Size        int64       `json:"size"`
	Format      string      `json:"format"`
	Detail      string      `json:"detail,omitempty"` // why a file that looks like a format does not parse
	Llama       *llamaInfo  `json:"llama,omitempty"`
	Safetensors *stInfo     `json:"safetensors,omitempty"`
	Stored      *storedInfo `json:"stored,omitempty"`
}

type llamaInfo struct {
	Version uint32        `json:"version"`
	Arch    string        `json:"arch,omitempty"`
	Tokens  int           `json:"tokens"`
	Streams []llamaStream `json:"streams"` // of every cache, in file order
	KVBytes int64         `json:"kvBytes"`
	// Model is the file's layout key: the model prefix lookup finds it
	// under (docs/PREFIX.md, "llama.cpp state files").
	Model string `json:"model"`
}

type llamaStream struct {
	Cache       int    `json:"cache"`
	Cells       uint32 `json:"cells"`
	CellExt     bool   `json:"cellExt,omitempty"`
	Layers      int    `json:"layers"`
	KType       int32  `json:"kType"`
	KRowBytes   uint64 `json:"kRowBytes"`
	VTransposed bool   `json:"vTransposed"`
	VType       int32  `json:"vType"`
	VWidth      uint64 `json:"vWidth"` // row bytes, or the element size when transposed
	VChannels   uint32 `json:"vChannels,omitempty"`
}

type stInfo struct {
	Tensors  int                `json:"tensors"`
	DTypes   map[string]int     `json:"dtypes"`
	Shapes   map[string][]int64 `json:"shapes"` // the first tensors by name
	Metadata map[string]string  `json:"metadata,omitempty"`
}

// storedInfo is what a kvfs mount says of a file (its user.kvfs.*
// attributes); nil off a mount.
type storedInfo struct {
	Kind         string `json:"kind"`
	StoredBytes  int64  `json:"storedBytes"`
	SharedBytes  int64  `json:"sharedBytes"`
	Parent       string `json:"parent,omitempty"`
	SharedTokens int    `json:"sharedTokens,omitempty"`
}

// readStored reads a file's user.kvfs.* attributes, or returns nil when
// it is on no kvfs mount.
func readStored(path string) *storedInfo {
	get := func(name string) (string, bool) {
		buf := make([]byte, 4096)
		n, err := unix.Getxattr(path, name, buf)
		if err != nil {
			return "", false
		}
		return string(buf[:n]), true
	}
	kind, ok := get("user.kvfs.kind")
	if !ok {
		return nil
	}
	st := &storedInfo{Kind: kind}
	if v, ok := get("user.kvfs.stored_bytes"); ok {
		st.StoredBytes, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := get("user.kvfs.shared_bytes"); ok {
		st.SharedBytes, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := get("user.kvfs.parent"); ok {
		if i := strings.LastIndexByte(v, ' '); i > 0 {
			st.Parent = v[:i]
			st.SharedTokens, _ = strconv.Atoi(v[i+1:])
		}
	}
	return st
}

// inspectOther reports on a file that is not a snapshot.
func inspectOther(f *os.File, path string, size int64, head []byte, o inspectOptions, stdout io.Writer) error {
	r := otherReport{File: path, Size: size, Format: "unrecognised"}
	switch {
	case llamastate.Sniff(head):
		r.Format = "llama.cpp state"
		st, err := llamastate.Parse(f, size, path)
		if err != nil {
			r.Detail = err.Error()
			break
		}
		r.Format = "llama.cpp sequence state (ggsq)"
		if st.Magic == llamastate.MagicSession {
			r.Format = "llama.cpp session (ggsn)"
		}
		li := &llamaInfo{Version: st.Version, Arch: st.Arch, Tokens: len(st.Tokens), Model: st.Key()}
		for ci, c := range st.Caches {
			for _, s := range c.Streams {
				ls := llamaStream{Cache: ci, Cells: s.Cells, CellExt: s.Ext, Layers: len(s.K), VTransposed: s.VTrans}
				if len(s.K) > 0 {
					ls.KType, ls.KRowBytes = s.K[0].Type, s.K[0].Width
				}
				if len(s.V) > 0 {
					ls.VType, ls.VWidth, ls.VChannels = s.V[0].Type, s.V[0].Width, s.V[0].Channels
				}
				li.Streams = append(li.Streams, ls)
			}
		}
		for _, b := range st.Blocks() {
			li.KVBytes += b.Rows * b.RowBytes
		}
		r.Llama = li
	case safetensors.Sniff(head, size):
		r.Format = "safetensors"
		st, err := safetensors.Parse(f, size, path)
		if err != nil {
			r.Detail = err.Error()
			break
		}
		si := &stInfo{Tensors: len(st.Tensors), DTypes: map[string]int{}, Shapes: map[string][]int64{}, Metadata: st.Metadata}
		names := make([]string, 0, len(st.Tensors))
		for _, t := range st.Tensors {
			si.DTypes[t.DType]++
			names = append(names, t.Name)
		}
		sort.Strings(names)
		for _, t := range st.Tensors {
			for _, n := range names[:min(len(names), 4)] {
				if t.Name == n {
					si.Shapes[n] = t.Shape
				}
			}
		}
		r.Safetensors = si
	}
	r.Stored = readStored(path)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(stdout, "file:         %s (%s)\n", r.File, formatBytes(r.Size))
	fmt.Fprintf(stdout, "format:       %s\n", r.Format)
	if r.Detail != "" {
		fmt.Fprintf(stdout, "not parsed:   %s\n", r.Detail)
	}
	if li := r.Llama; li != nil {
		if li.Arch != "" {
			fmt.Fprintf(stdout, "architecture: %s\n", li.Arch)
		}
		fmt.Fprintf(stdout, "version:      %d\n", li.Version)
		fmt.Fprintf(stdout, "tokens:       %d\n", li.Tokens)
		for i, s := range li.Streams {
			v := fmt.Sprintf("V type %d, %d bytes a cell", s.VType, s.VWidth)
			if s.VTransposed {
				v = fmt.Sprintf("V transposed (flash attention off): type %d, %d channels of %d-byte elements", s.VType, s.VChannels, s.VWidth)
			}
			fmt.Fprintf(stdout, "stream %d:     cache %d, %d cells, %d layers; K type %d, %d bytes a cell; %s\n", i, s.Cache, s.Cells, s.Layers, s.KType, s.KRowBytes, v)
		}
		fmt.Fprintf(stdout, "KV bytes:     %d (%s)\n", li.KVBytes, formatBytes(li.KVBytes))
		fmt.Fprintf(stdout, "lookup model: %s (kvfs match --like %s, or --model it --fingerprint %s)\n", li.Model, path, store.LlamaFingerprint)
	}
	if si := r.Safetensors; si != nil {
		fmt.Fprintf(stdout, "tensors:      %d %v\n", si.Tensors, si.DTypes)
		names := make([]string, 0, len(si.Shapes))
		for n := range si.Shapes {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(stdout, "  %-10s  %v\n", n, si.Shapes[n])
		}
		if c := si.Metadata["2.0"]; c != "" {
			fmt.Fprintf(stdout, "mlx-lm cache: %s (metadata 2.*: the cache classes)\n", c)
		}
	}
	printStored(stdout, r.Stored)
	return nil
}

// printStored prints what a kvfs mount says of the file.
func printStored(w io.Writer, st *storedInfo) {
	if st == nil {
		return
	}
	fmt.Fprintf(w, "stored as:    %s: its chunks hold %s, %s of them shared with other files\n", st.Kind, formatBytes(st.StoredBytes), formatBytes(st.SharedBytes))
	if st.Parent != "" {
		fmt.Fprintf(w, "parent:       %s (%d tokens in common)\n", st.Parent, st.SharedTokens)
	}
}
