package manifest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzMutations decodes arbitrary bytes as a journal record: a damaged
// journal must give an error, never a panic or a huge allocation; what
// decodes must be well-formed (known buckets, keys not empty and
// ascending, values not nil) and encode back to the same bytes (the
// encoding is canonical).
func FuzzMutations(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMutations(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "decode journal record: ") {
				t.Fatalf("error does not say what it decoded: %v", err)
			}
			return
		}
		if m.count() == 0 {
			t.Fatal("a record without mutations decoded")
		}
		for i, es := range m {
			for j, e := range es {
				if len(e.key) == 0 || (j > 0 && bytes.Compare(es[j-1].key, e.key) >= 0) {
					t.Fatalf("bucket %s: key %x out of order or empty", allBuckets[i], e.key)
				}
				if !e.del && e.val == nil {
					t.Fatalf("bucket %s: key %x: nil value", allBuckets[i], e.key)
				}
			}
		}
		if enc := m.encode(); !bytes.Equal(enc, b) {
			t.Fatalf("encoding is not canonical:\n in %x\nout %x", b, enc)
		}
	})
}

// TestFuzzMutationsCorpus keeps the seed corpus honest: the valid seed
// decodes, the damaged ones do not.
func TestFuzzMutationsCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzMutations")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) < 5 {
		t.Fatalf("corpus: %d seeds, %v", len(ents), err)
	}
	for _, ent := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(raw)), "\n", 2)
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a fuzz corpus file", ent.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", ent.Name(), err)
		}
		_, err = decodeMutations([]byte(s))
		if bad := strings.HasPrefix(ent.Name(), "bad-"); bad != (err != nil) {
			t.Errorf("%s: decode error %v", ent.Name(), err)
		}
	}
}

// TestMutationsRoundTrip: random mutations, empty values and long keys
// included, decode to what was encoded.
func TestMutationsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		w := &writes{}
		for range 1 + r.IntN(30) {
			k := make([]byte, 1+r.IntN(300))
			for i := range k {
				k[i] = byte(r.IntN(4))
			}
			e := &entry{key: k, del: r.IntN(3) == 0}
			if !e.del {
				e.val = bytes.Repeat([]byte{'v'}, r.IntN(200))
			}
			w.set(r.IntN(numBuckets), e)
		}
		m := w.mutations()
		back, err := decodeMutations(m.encode())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip changed the mutations")
		}
	}
}
