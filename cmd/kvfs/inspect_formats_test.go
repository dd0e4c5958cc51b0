package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/safetensors/safetensorstest"
)

// TestInspectOtherFormats: inspect explains llama.cpp state files (both
// kinds, both V layouts), mlx-lm prompt caches and files of no known
// format by their bytes, whatever their names, and says why a file that
// looks like a format does not parse.
func TestInspectOtherFormats(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toks := []uint32{1, 2, 3, 4, 5}
	seq := write("slot0.bin", llamastatetest.Write(llamastatetest.Spec{Layers: 2, KRow: 64, VEl: 2, VChannels: 16}, toks))
	ses := write("prompt.cache", llamastatetest.Write(llamastatetest.Spec{Session: true, Arch: "qwen3", Layers: 3, KRow: 32, FlashAttn: true}, toks))
	st := write("cache.safetensors", safetensorstest.PromptCache(safetensorstest.Spec{Layers: 2, Heads: 2, HeadDim: 8}, toks))
	bad := llamastatetest.Write(llamastatetest.Spec{Layers: 2, KRow: 64, FlashAttn: true}, toks)
	trunc := write("truncated.state", bad[:len(bad)-3])
	plain := write("notes.txt", []byte("nothing to see here\n"))
	code, out, errOut := runCmd("inspect", seq, ses, st, trunc, plain)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"format:       llama.cpp sequence state (ggsq)",
		"V transposed (flash attention off): type 1, 16 channels of 2-byte elements",
		"format:       llama.cpp session (ggsn)", "architecture: qwen3", "3 layers; K type 1, 32 bytes a cell; V type 1, 32 bytes a cell",
		"format:       safetensors", "tensors:      4 map[BF16:4]", "[1 2 5 8]", "mlx-lm cache: KVCache",
		"format:       llama.cpp state\nnot parsed:   llama.cpp state " + trunc,
		"format:       unrecognised",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCmd("inspect", "--json", seq)
	var r otherReport
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Llama == nil || r.Llama.Tokens != 5 ||
		len(r.Llama.Streams) != 1 || !r.Llama.Streams[0].VTransposed || r.Llama.KVBytes != 2*5*64+2*16*5*2 || r.Stored != nil {
		t.Fatalf("--json: %d %+v\n%s", code, r, out)
	}
}
