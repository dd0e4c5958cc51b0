package mlx

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// chainVectors are the inputs of docs/PREFIX.md's test vectors.
var chainVectors = map[string]struct {
	model, fp, ns string
	tokens        []uint32
}{
	"v1": {"fixture/tiny-kv", "fixture-fingerprint", "", gen(600, func(i int) uint32 { return uint32((i*7919 + 3) % 32000) })},
	"v2": {"m", "f", "french", gen(512, func(i int) uint32 { return uint32(i) })},
	"v3": {"", "", "", gen(256, func(i int) uint32 { return 0xffffffff - uint32(i) })},
}

func gen(n int, f func(int) uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// docVectors reads the table of docs/PREFIX.md: vector → keys in k order.
func docVectors(t *testing.T) map[string][]string {
	f, err := os.Open("../docs/PREFIX.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "|")
		if len(c) != 5 {
			continue
		}
		name, key := strings.TrimSpace(c[1]), strings.TrimSpace(c[3])
		if _, ok := chainVectors[name]; ok && len(key) == 64 {
			out[name] = append(out[name], key)
		}
	}
	return out
}

// TestChainKeyVectors: the Go keys equal the documented vectors (computed
// with Python's hashlib), and h(k) has one key per whole group.
func TestChainKeyVectors(t *testing.T) {
	doc := docVectors(t)
	if len(doc) != len(chainVectors) {
		t.Fatalf("docs/PREFIX.md lists vectors %v", doc)
	}
	for name, v := range chainVectors {
		keys := ChainKeys(v.model, v.fp, v.ns, v.tokens)
		if len(keys) != len(v.tokens)/GroupTokens+1 || len(keys) != len(doc[name]) {
			t.Fatalf("%s: %d keys, doc lists %d", name, len(keys), len(doc[name]))
		}
		for k, key := range keys {
			if got := hex.EncodeToString(key[:]); got != doc[name][k] {
				t.Errorf("%s h%d = %s, doc says %s", name, k, got, doc[name][k])
			}
		}
		// A partial trailing group changes no key.
		more := ChainKeys(v.model, v.fp, v.ns, append(v.tokens, 1, 2, 3))
		if more[len(more)-1] != keys[len(keys)-1] {
			t.Errorf("%s: a partial group changed the last key", name)
		}
	}
}

// TestChainKeyPython re-runs the doc's Python reference on the inputs, if
// python3 is installed: the vectors are not only what this code computes.
func TestChainKeyPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed; TestChainKeyVectors checks the recorded values")
	}
	script := `import hashlib, struct, json, sys
def keys(model, fp, ns, tokens):
    h = hashlib.sha256(b"kvfs-prefix-v1\x00" + model.encode() + b"\x00" + fp.encode() + b"\x00" + ns.encode()).digest()
    out = [h]
    for k in range(len(tokens) // 256):
        h = hashlib.sha256(h + struct.pack("<256I", *tokens[256*k:256*(k+1)])).digest()
        out.append(h)
    return [x.hex() for x in out]
v = json.load(sys.stdin)
print(json.dumps(keys(v["model"], v["fp"], v["ns"], v["tokens"])))
`
	for name, v := range chainVectors {
		in, _ := json.Marshal(map[string]any{"model": v.model, "fp": v.fp, "ns": v.ns, "tokens": v.tokens})
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = strings.NewReader(string(in))
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		for k, key := range ChainKeys(v.model, v.fp, v.ns, v.tokens) {
			if hex.EncodeToString(key[:]) != want[k] {
				t.Errorf("%s h%d: Go %x, Python %s", name, k, key, want[k])
			}
		}
	}
}

// TestChainKeyFixture: the keys of the engine-written fixture snapshot
// (FORMAT.md §9), computed from its header, are the vector v1's.
func TestChainKeyFixture(t *testing.T) {
	s, err := ReadFile("testdata/mlxbun/whole/fixture-fingerprint/base/00000000-0000-4000-8000-000000000400.mlxkv")
	if err != nil {
		t.Fatal(err)
	}
	h := s.Header
	keys := ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, h.Tokens)
	doc := docVectors(t)["v1"]
	if len(keys) != 2 || hex.EncodeToString(keys[0][:]) != doc[0] || hex.EncodeToString(keys[1][:]) != doc[1] {
		t.Errorf("fixture keys %x, doc v1 %v", keys, doc)
	}
}
