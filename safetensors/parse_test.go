package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/safetensors"
	"github.com/kvfs/kvfs/safetensors/safetensorstest"
)

func toks(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i*13 + 1)
	}
	return t
}

// TestParseAgainstPython: the parser and an independent reader in Python
// (testdata/check.py, written from the specification) agree on every
// tensor of mlx-lm-shaped prompt caches.
func TestParseAgainstPython(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{1, 100, 777} {
		b := safetensorstest.PromptCache(safetensorstest.Spec{Layers: 3, Heads: 2, HeadDim: 64}, toks(n))
		p := filepath.Join(dir, "c.safetensors")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("python3", "testdata/check.py", p).Output()
		if err != nil {
			t.Fatalf("python3 testdata/check.py: %v", err)
		}
		var want [][]any
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Parse(bytes.NewReader(b), int64(len(b)), p)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]any
		for _, t := range f.Tensors {
			shape := []any{}
			for _, d := range t.Shape {
				shape = append(shape, float64(d))
			}
			got = append(got, []any{t.Name, t.DType, shape, float64(t.Off), float64(t.End)})
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Fatalf("%d tokens:\nparse:  %s\npython: %s", n, gj, wj)
		}
		if f.Metadata["2.0"] != "KVCache" || len(f.Tensors) != 6 {
			t.Fatalf("metadata %v", f.Metadata)
		}
	}
}

func header(h string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(b, h...), make([]byte, data)...)
}

func TestParseRefuses(t *testing.T) {
	cases := map[string][]byte{
		"empty":         nil,
		"short":         []byte("12345678{"),
		"huge header":   append(binary.LittleEndian.AppendUint64(nil, 1<<40), '{'),
		"not json":      header("{x", 0),
		"trailing":      header(`{}x`, 0),
		"unknown dtype": header(`{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}`, 2),
		"wrong bytes":   header(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,2]}}`, 4),
		"past the end":  header(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 4),
		"overlap": header(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},`+
			`"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 8),
		"negative dim": header(`{"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,0]}}`, 0),
		"overflow":     header(`{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 0),
		"bad metadata": header(`{"__metadata__":{"a":1}}`, 0),
	}
	for name, b := range cases {
		if f, err := safetensors.Parse(bytes.NewReader(b), int64(len(b)), name); err == nil {
			t.Errorf("%s: parsed %+v", name, f)
		}
	}
	ok := header(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}  `, 4)
	if _, err := safetensors.Parse(bytes.NewReader(ok), int64(len(ok)), "padded"); err != nil {
		t.Fatalf("a header padded with spaces: %v", err)
	}
}
