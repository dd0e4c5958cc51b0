package mlx

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the fuzz seed corpus in testdata/fuzz")

// rehash makes the prefix's headerHash match the header bytes, when the
// prefix is intact enough to find them. Without it almost every mutation
// of the JSON would stop at the header hash check, and the fuzzer would
// never reach the validator.
func rehash(data []byte) []byte {
	var p Prefix
	if p.UnmarshalBinary(data) != nil || int64(len(data)) < PrefixLen+int64(p.HeaderLen) {
		return data
	}
	data = bytes.Clone(data)
	p.HeaderHash = Hash(data[PrefixLen : PrefixLen+int(p.HeaderLen)])
	p.AppendBinary(data[:0])
	return data
}

// fuzzFile is a snapshot file made of fuzzed leading bytes (prefix, header,
// anything after) followed by tail zero bytes, so a fuzzed header can
// describe a file of any size without the corpus holding its padding.
type fuzzFile struct {
	head []byte
	tail int64
}

func (f fuzzFile) size() int64 { return int64(len(f.head)) + f.tail }

func (f fuzzFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= f.size() {
		return 0, io.EOF
	}
	n := 0
	if off < int64(len(f.head)) {
		n = copy(p, f.head[off:])
	}
	rest := min(int64(len(p)-n), f.size()-off-int64(n))
	clear(p[n : n+int(rest)])
	n += int(rest)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// maxFuzzTail bounds the zero tail: Parse reads only the header, but the
// target also reads and verifies every tensor.
const maxFuzzTail = 1 << 16

func newFuzzFile(head []byte, tail int64, fix bool) fuzzFile {
	if fix {
		head = rehash(head)
	}
	return fuzzFile{head, min(max(tail, 0), maxFuzzTail)}
}

// FuzzParse feeds arbitrary bytes to Parse, with the header hash fixed up
// when fix is set. A file that parses must have every whole-layout tensor
// inside it, must re-encode, and must read and verify without panicking.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, head []byte, tail int64, fix bool) {
		file := newFuzzFile(head, tail, fix)
		s, err := Parse(file, file.size(), "fuzz.mlxkv")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.mlxkv: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if _, err := s.Header.MarshalJSON(); err != nil {
			t.Fatalf("parsed header does not encode: %v", err)
		}
		for i, slot := range s.Header.Slots() {
			if !s.Blocks() && slot.Bytes > 0 && s.DataStart()+slot.Off+slot.Bytes > file.size() {
				t.Fatalf("slot %d extends past the file", i)
			}
			n, err := io.Copy(io.Discard, s.SlotReader(i, file, emptyBlocks{}))
			if err == nil && n != slot.Bytes {
				t.Fatalf("slot %d read %d of %d bytes without error", i, n, slot.Bytes)
			}
		}
		s.Verify(t.Context(), file, emptyBlocks{})
	})
}

// FuzzTrim trims whatever parses to an arbitrary length. A trim that
// succeeds must give extents inside their source slots that add up to each
// trimmed slot, and a header that plans and encodes.
func FuzzTrim(f *testing.F) {
	f.Fuzz(func(t *testing.T, head []byte, tail int64, n int64) {
		file := newFuzzFile(head, tail, true)
		s, err := Parse(file, file.size(), "fuzz.mlxkv")
		if err != nil {
			return
		}
		tr, err := Trim(s.Header, n)
		if err != nil {
			return
		}
		src := s.Header.Slots()
		for i, slot := range tr.Header.Slots() {
			var sum int64
			for _, e := range tr.Extents[i] {
				if e.Slot < 0 || e.Slot >= len(src) || e.Off < 0 || e.Len < 0 || e.Off+e.Len > src[e.Slot].Bytes {
					t.Fatalf("slot %d: extent %+v outside its source", i, e)
				}
				sum += e.Len
			}
			if sum != slot.Bytes {
				t.Fatalf("slot %d: extents cover %d of %d bytes", i, sum, slot.Bytes)
			}
		}
		if int64(len(tr.Header.Tokens)) != n {
			t.Fatalf("trimmed to %d tokens, want %d", len(tr.Header.Tokens), n)
		}
		if _, err := tr.Header.MarshalJSON(); err != nil {
			t.Fatal(err)
		}
	})
}

// emptyBlocks is a block source that holds one block of each size, filled
// with zeros, so fuzzed manifests exercise the block reader too.
type emptyBlocks struct{}

func (emptyBlocks) OpenBlock(hash string) (io.ReadCloser, error) {
	return io.NopCloser(io.LimitReader(zeros{}, 256)), nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestFuzzCorpus checks that the checked-in seed corpus exists, and with
// -update-corpus rewrites it from the fixtures and hand-made edge cases.
func TestFuzzCorpus(t *testing.T) {
	seeds := map[string][]byte{}
	if *updateCorpus {
		seeds = corpusSeeds(t)
	}
	for _, target := range []string{"FuzzParse", "FuzzTrim"} {
		dir := filepath.Join("testdata", "fuzz", target)
		if *updateCorpus {
			os.RemoveAll(dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, b := range seeds {
				// The seed keeps the prefix and header; the rest of
				// the file is the zero tail (tensor bytes are lost,
				// sizes are kept).
				head := b
				var p Prefix
				if p.UnmarshalBinary(b) == nil && PrefixLen+int(p.HeaderLen) <= len(b) {
					head = b[:PrefixLen+int(p.HeaderLen)]
				}
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\nint64(%d)\n", strconv.Quote(string(head)), len(b)-len(head))
				if target == "FuzzTrim" {
					body += fmt.Sprintf("int64(%d)\n", len(b)%5)
				} else {
					body += fmt.Sprintf("bool(%v)\n", len(name)%2 == 0)
				}
				sum := sha256.Sum256([]byte(name))
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%x", name, sum[:4])), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) < 10 {
			t.Fatalf("%s: seed corpus has %d entries (%v); run go test ./mlx -run TestFuzzCorpus -update-corpus", target, len(entries), err)
		}
	}
}

func corpusSeeds(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{}
	seeds["blocks300"] = readFile(t, fixturePath("blocks", 300))
	seeds["blocks400"] = readFile(t, fixturePath("blocks", 400))
	// Small files: a one-layer snapshot of 4 tokens in both layouts, and the
	// blocks manifest of a snapshot with every kind and attachments (a
	// whole file of it would be mostly padding).
	dir := t.TempDir()
	shape := []int64{1, 1, 4, 2}
	h := &Header{CreatedAt: 1, ModelID: "m", Tokens: []uint32{1, 2, 3, 4}, Caches: []CacheEntry{{Kind: KindKV, Offset: 4,
		Tensors: []Slot{{Shape: shape, DType: BFloat16}, {Shape: shape, DType: BFloat16}}}}}
	tensors := []Tensor{Contiguous(rnd(16, 1), BFloat16, shape...), Contiguous(rnd(16, 2), BFloat16, shape...)}
	for name, w := range map[string]*Writer{"whole4": {}, "blocks4": {Layout: BlocksLayout, BlockBytes: 8}} {
		p := filepath.Join(dir, name)
		if _, _, err := w.Write(p, h, tensors); err != nil {
			t.Fatal(err)
		}
		seeds[name] = readFile(t, p)
	}
	kinds, kindTensors := allKindsSnapshot(t)
	p := filepath.Join(dir, "kinds")
	if _, _, err := (&Writer{Layout: BlocksLayout, BlockBytes: 64}).Write(p, kinds, kindTensors); err != nil {
		t.Fatal(err)
	}
	seeds["all-kinds"] = readFile(t, p)
	whole := seeds["whole4"]
	seeds["empty"] = nil
	seeds["magic-only"] = []byte(Magic)
	seeds["v1"] = append([]byte(MagicV1), whole[10:200]...)
	seeds["truncated-header"] = whole[:100]
	seeds["truncated-data"] = whole[:len(whole)-3]
	bad := bytes.Clone(whole)
	bad[40] ^= 1
	seeds["header-hash"] = bad
	js := string(whole[PrefixLen : PrefixLen+int(whole[10])|int(whole[11])<<8])
	for name, mut := range map[string][2]string{
		"overlap":    {`"off":16384`, `"off":10`},
		"lying":      {`[1,1,4,2]`, `[1,1,40000,2]`},
		"huge":       {`"bytes":16`, `"bytes":9223372036854775807`},
		"rotating":   {`"kind":"kv","offset":4`, `"kind":"rotating","offset":4,"idx":4,"maxSize":8`},
		"ssm":        {`"kind":"kv"`, `"kind":"ssm"`},
		"mro":        {`"offset":4,`, `"offset":4,"minimumReusableOffset":2,`},
		"v4":         {`"formatVersion":3`, `"formatVersion":4`},
		"negative":   {`"off":0`, `"off":-1`},
		"checkpoint": {`"ns":""`, `"ns":"","generationCheckpoint":{"key":"k","cacheNs":"","originalPromptTokens":1,"generatedTokens":1,"pendingToken":1,"seed":1,"seedWasExplicit":false}`},
	} {
		if !strings.Contains(js, mut[0]) {
			t.Fatalf("seed %s: %q not in header", name, mut[0])
		}
		seeds["mut-"+name] = rehead(t, whole, strings.Replace(js, mut[0], mut[1], 1))
	}
	return seeds
}
