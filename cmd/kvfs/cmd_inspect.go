package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvfs/kvfs/mlx"
	"github.com/spf13/pflag"
)

type inspectOptions struct {
	verify bool
	json   bool
}

func (o *inspectOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.verify, "verify", false, "check every tensor against its hash (whole layout) or every block against its sha256 (blocks layout, read from the blocks directory beside FILE)")
	fs.BoolVar(&o.json, "json", false, "print a JSON object instead of text, for scripts")
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o inspectOptions
	fs := newFlags("inspect", "[--verify] [--json] FILE...", "Print what a cache file holds. A .mlxkv snapshot: its format and layout,\nmodel, namespace, token count, and each cache's kind, tensor shapes, dtypes\nand sizes; with --verify, also check the tensor bytes against their\nrecorded hashes (a mismatch exits with status 3). A llama.cpp state file\n(sequence state or session): its tokens, cells, layers and K/V layout. A\nsafetensors file (mlx-lm's prompt caches): its tensors and metadata. On a\nkvfs mount, also how the file is stored: as what, its own and shared bytes,\nand the file it shares its rows with (see docs/ENGINES.md).")
	o.addFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no file given")
	}
	var corrupt, failed int
	for i, path := range fs.Args() {
		if i > 0 && !o.json {
			fmt.Fprintln(stdout)
		}
		err := inspectFile(ctx, path, o, stdout)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return err
		case fs.NArg() == 1:
			return err
		default:
			// Report every file; the worst failure decides the exit code.
			fmt.Fprintf(stderr, "kvfs inspect: %v\n", err)
			if errors.Is(err, errCorrupt) {
				corrupt++
			} else {
				failed++
			}
		}
	}
	switch {
	case corrupt > 0:
		return fmt.Errorf("%w in %d of %d files", errCorrupt, corrupt, fs.NArg())
	case failed > 0:
		return fmt.Errorf("%d of %d files could not be inspected", failed, fs.NArg())
	}
	return nil
}

// inspectReport is the --json form of inspect's output.
type inspectReport struct {
	File              string       `json:"file"`
	Size              int64        `json:"size"`
	FormatVersion     int          `json:"formatVersion"`
	Layout            string       `json:"layout"`
	ModelID           string       `json:"modelId"`
	ConfigFingerprint string       `json:"configFingerprint"`
	TokenizerHash     string       `json:"tokenizerHash"`
	Namespace         string       `json:"ns"`
	CodecProvider     string       `json:"codecProvider"`
	CreatedAt         int64        `json:"createdAt"`
	Tokens            int          `json:"tokens"`
	HeaderLen         uint32       `json:"headerLen"`
	DataStart         uint32       `json:"dataStart"`
	HeaderHash        string       `json:"headerHash"`
	Checkpoint        bool         `json:"generationCheckpoint"`
	Attachments       int          `json:"attachments"`
	Caches            []cacheInfo  `json:"caches"`
	TensorBytes       int64        `json:"tensorBytes"`
	Blocks            int          `json:"blocks,omitempty"`
	Verified          *bool        `json:"verified"`
	VerifyError       string       `json:"verifyError,omitempty"`
	Trimmable         bool         `json:"trimmable"`
	Stored            *storedInfo  `json:"stored,omitempty"`
	Tensors           []tensorInfo `json:"-"`
}

type cacheInfo struct {
	Kind    string       `json:"kind"`
	Offset  int64        `json:"offset"`
	Tensors []tensorInfo `json:"tensors"`
}

type tensorInfo struct {
	Shape  []int64 `json:"shape"`
	DType  string  `json:"dtype"`
	Bytes  int64   `json:"bytes"`
	Blocks int     `json:"blocks,omitempty"`
}

func inspectFile(ctx context.Context, path string, o inspectOptions, stdout io.Writer) error {
	// Errors already name the path: *os.PathError and *mlx.FormatError.
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s: is a directory, not a snapshot file", path)
	}
	var head [16]byte
	n, _ := f.ReadAt(head[:], 0)
	if !strings.HasPrefix(string(head[:n]), mlx.Magic) && !strings.HasSuffix(path, ".mlxkv") {
		return inspectOther(f, path, fi.Size(), head[:n], o, stdout)
	}
	s, err := mlx.Parse(f, fi.Size(), path)
	if err != nil {
		return err
	}
	h := s.Header
	r := inspectReport{
		File: path, Size: s.Size, FormatVersion: h.FormatVersion, Layout: "whole",
		ModelID: h.ModelID, ConfigFingerprint: h.ConfigFingerprint, TokenizerHash: h.TokenizerHash,
		Namespace: h.NS, CodecProvider: h.CodecProvider, CreatedAt: h.CreatedAt, Tokens: len(h.Tokens),
		HeaderLen: s.Prefix.HeaderLen, DataStart: s.Prefix.DataStart, HeaderHash: mlx.HashHex(s.Prefix.HeaderHash),
		Checkpoint: h.GenerationCheckpoint != nil, Attachments: len(h.Attachments), TensorBytes: s.LogicalBytes(),
	}
	if s.Blocks() {
		r.Layout = "blocks"
	}
	if r.CodecProvider == "" {
		r.CodecProvider = mlx.DefaultCodecProvider
	}
	_, terr := mlx.Trim(h, int64(len(h.Tokens)))
	r.Trimmable = terr == nil
	for _, e := range h.Caches {
		c := cacheInfo{Kind: string(e.Kind), Offset: e.Offset}
		for _, t := range e.Tensors {
			c.Tensors = append(c.Tensors, tensorInfo{t.Shape, t.DType.String(), t.Bytes, len(t.Blocks)})
			r.Blocks += len(t.Blocks)
		}
		r.Caches = append(r.Caches, c)
	}
	r.Stored = readStored(path)
	var verr error
	if o.verify {
		verr = s.Verify(ctx, f, mlx.BlockDir(filepath.Dir(path)))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ok := verr == nil
		r.Verified = &ok
		if verr != nil {
			r.VerifyError = verr.Error()
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printReport(stdout, &r)
	}
	if verr != nil {
		if errors.Is(verr, mlx.ErrChecksum) {
			return fmt.Errorf("%w: %v", errCorrupt, verr)
		}
		return verr
	}
	return nil
}

func printReport(w io.Writer, r *inspectReport) {
	ns := fmt.Sprintf("%q", r.Namespace)
	if r.Namespace == "" {
		ns = `"" (base model)`
	}
	layout := "whole layout"
	if r.Layout == "blocks" {
		layout = fmt.Sprintf("blocks layout (%d block references)", r.Blocks)
	}
	fmt.Fprintf(w, "file:         %s (%s)\n", r.File, formatBytes(r.Size))
	fmt.Fprintf(w, "format:       %d, %s\n", r.FormatVersion, layout)
	fmt.Fprintf(w, "model:        %s\n", r.ModelID)
	fmt.Fprintf(w, "fingerprint:  %s\n", r.ConfigFingerprint)
	fmt.Fprintf(w, "tokenizer:    %s\n", r.TokenizerHash)
	fmt.Fprintf(w, "namespace:    %s\n", ns)
	fmt.Fprintf(w, "codec:        %s\n", r.CodecProvider)
	fmt.Fprintf(w, "created:      %s\n", time.UnixMilli(r.CreatedAt).UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "tokens:       %d\n", r.Tokens)
	fmt.Fprintf(w, "header:       %d bytes, hash %s, data at %d\n", r.HeaderLen, r.HeaderHash, r.DataStart)
	var extra []string
	if r.Checkpoint {
		extra = append(extra, "generation checkpoint")
	}
	if r.Attachments > 0 {
		extra = append(extra, fmt.Sprintf("%d attachment(s)", r.Attachments))
	}
	if r.Trimmable {
		extra = append(extra, "trimmable to a shorter prefix")
	} else {
		extra = append(extra, "not trimmable")
	}
	fmt.Fprintf(w, "properties:   %s\n", strings.Join(extra, ", "))
	fmt.Fprintf(w, "caches:       %d\n", len(r.Caches))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\tkind\toffset\ttensor\tshape\tdtype\tbytes\n")
	for i, c := range r.Caches {
		for j, t := range c.Tensors {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%v\t%s\t%s\n", i, c.Kind, c.Offset, j, t.Shape, t.DType, formatBytes(t.Bytes))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "tensor bytes: %d (%s)\n", r.TensorBytes, formatBytes(r.TensorBytes))
	switch {
	case r.Verified == nil:
		fmt.Fprintf(w, "verify:       not checked (use --verify)\n")
	case *r.Verified:
		fmt.Fprintf(w, "verify:       ok\n")
	default:
		fmt.Fprintf(w, "verify:       FAILED: %s\n", r.VerifyError)
	}
	printStored(w, r.Stored)
}

// formatBytes prints n in binary units.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
