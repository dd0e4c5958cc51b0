package mlx

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func i64(v int64) *int64 { return &v }

func slot(shape ...int64) Slot {
	return Slot{Off: 0, Bytes: 0, Shape: shape, DType: BFloat16, Hash: "0000000000000000"}
}

// TestEncodeKeyOrder pins the JSON of every cache kind to FORMAT.md §2.2.
func TestEncodeKeyOrder(t *testing.T) {
	s := `{"off":0,"bytes":0,"shape":[1],"dtype":12,"hash":"0000000000000000"}`
	cases := []struct {
		e    CacheEntry
		want string
	}{
		{CacheEntry{Kind: KindKV, Offset: 3, Tensors: []Slot{slot(1)}},
			`{"kind":"kv","offset":3,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindSSM, Offset: 3, Tensors: []Slot{slot(1)}},
			`{"kind":"ssm","offset":3,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindRotating, Offset: 3, Idx: 2, MaxSize: 9, Tensors: []Slot{slot(1)}, MinimumReusableOffset: i64(1)},
			`{"kind":"rotating","offset":3,"idx":2,"maxSize":9,"tensors":[` + s + `],"minimumReusableOffset":1}`},
		{CacheEntry{Kind: KindQKV, Offset: 3, GroupSize: 64, Bits: 4, Tensors: []Slot{slot(1)}},
			`{"kind":"qkv","offset":3,"groupSize":64,"bits":4,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindRotatingQKV, Offset: 3, Idx: 1, MaxSize: 8, GroupSize: 32, Bits: 8, Tensors: []Slot{slot(1)}},
			`{"kind":"rotating-qkv","offset":3,"idx":1,"maxSize":8,"groupSize":32,"bits":8,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindTurboQuant, Offset: 3, KBits: 4, VBits: 2, Tensors: []Slot{slot(1)}},
			`{"kind":"turboquant","offset":3,"kBits":4,"vBits":2,"headDim":0,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindMLA, Offset: 3, KVLoraRank: 512, RopeHeadDim: 64, MaxTokens: 9007199254740991, Tensors: []Slot{slot(1)}},
			`{"kind":"mla","offset":3,"kvLoraRank":512,"ropeHeadDim":64,"maxTokens":9007199254740991,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindMLADSA, Offset: 3, KVLoraRank: 512, RopeHeadDim: 64, DSAHeadDim: 128, MaxTokens: 7, Tensors: []Slot{slot(1)}},
			`{"kind":"mla-dsa","offset":3,"kvLoraRank":512,"ropeHeadDim":64,"dsaHeadDim":128,"maxTokens":7,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindMTPMLA, Offset: 3, KVLoraRank: 1, RopeHeadDim: 2, MaxTokens: 7, Tensors: []Slot{slot(1)}},
			`{"kind":"mtp-mla","offset":3,"kvLoraRank":1,"ropeHeadDim":2,"maxTokens":7,"tensors":[` + s + `]}`},
		{CacheEntry{Kind: KindPaged, Offset: 3, Tensors: []Slot{slot(1)}, Paged: &PagedLayout{CapacityTokens: 64, BlockSize: 16, BlockTable: []int64{2, 0}, NumBlocks: 4, HeadDim: 64, VHeadDim: 64, DType: 12, Direct: true}},
			`{"kind":"paged","offset":3,"tensors":[` + s + `],"paged":{"capacityTokens":64,"blockSize":16,"blockTable":[2,0],"numBlocks":4,"headDim":64,"vHeadDim":64,"dtype":12,"direct":true}}`},
		{CacheEntry{Kind: KindPaged, Offset: 3, Bits: 4, GroupSize: 64, Tensors: []Slot{slot(1)}, Paged: &PagedLayout{BlockTable: []int64{}}, MinimumReusableOffset: i64(0)},
			`{"kind":"paged","offset":3,"tensors":[` + s + `],"bits":4,"groupSize":64,"paged":{"capacityTokens":0,"blockSize":0,"blockTable":[],"numBlocks":0,"headDim":0,"vHeadDim":0,"dtype":0,"direct":false},"minimumReusableOffset":0}`},
	}
	for _, c := range cases {
		e := jsonEncoder{}
		e.entry(&c.e)
		if e.err != nil {
			t.Fatalf("%s: %v", c.e.Kind, e.err)
		}
		if string(e.b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.e.Kind, e.b, c.want)
		}
	}
}

func TestEncodeHeaderTopLevel(t *testing.T) {
	h := &Header{
		FormatVersion: 4, CreatedAt: 1, ModelID: "m<&>\u2028", ConfigFingerprint: "f", TokenizerHash: "t", NS: "",
		GenerationCheckpoint: &GenerationCheckpoint{Key: "k", CacheNS: "c", OriginalPromptTokens: 1, GeneratedTokens: 2, PendingToken: 3, Seed: 4, SeedWasExplicit: true},
		Attachments:          []Attachment{{Schema: "s", Metadata: Metadata{{"b", true}, {"a", 1.5}, {"n", 1e21}, {"x", "\"\\\n\x01\x7f"}}, Tensors: []Slot{}}},
		CodecProvider:        "mlx-cache-v3", Tokens: []uint32{1, 4294967295}, Caches: []CacheEntry{},
	}
	want := `{"formatVersion":4,"createdAt":1,"modelId":"m<&>` + "\u2028" + `","configFingerprint":"f","tokenizerHash":"t","ns":"",` +
		`"generationCheckpoint":{"key":"k","cacheNs":"c","originalPromptTokens":1,"generatedTokens":2,"pendingToken":3,"seed":4,"seedWasExplicit":true},` +
		`"attachments":[{"schema":"s","metadata":{"b":true,"a":1.5,"n":1e+21,"x":"\"\\\n\u0001` + "\x7f" + `"},"tensors":[]}],` +
		`"codecProvider":"mlx-cache-v3","tokens":[1,4294967295],"caches":[]}`
	got, err := h.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	var back Header
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, h) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, *h)
	}
}

func TestEncodeNumbers(t *testing.T) {
	for f, want := range map[float64]string{0: "0", -0.5: "-0.5", 1e-7: "1e-7", 123456789: "123456789", 1e20: "100000000000000000000", 0.1: "0.1"} {
		e := jsonEncoder{}
		e.number(f)
		if string(e.b) != want {
			t.Errorf("number(%v) = %s, want %s", f, e.b, want)
		}
	}
	h := &Header{Attachments: []Attachment{{Metadata: Metadata{{"bad", []int{1}}}}}}
	if _, err := h.MarshalJSON(); err == nil || !strings.Contains(err.Error(), "unsupported value type") {
		t.Fatalf("bad metadata value: err = %v", err)
	}
}

// TestDecodeRejects checks the header-level validation of Unmarshal.
func TestDecodeRejects(t *testing.T) {
	base := func(caches string) string {
		return `{"formatVersion":3,"createdAt":1,"ns":"","tokens":[1,2],"caches":[` + caches + `]}`
	}
	kv := `{"kind":"kv","offset":2,"tensors":[{"off":0,"bytes":4,"shape":[1,1,2,1],"dtype":12,"hash":"0000000000000000"},{"off":16384,"bytes":4,"shape":[1,1,2,1],"dtype":12,"hash":"0000000000000000"}]}`
	var ok Header
	if err := json.Unmarshal([]byte(base(kv)), &ok); err != nil {
		t.Fatalf("valid header rejected: %v", err)
	}
	for name, js := range map[string]string{
		"no tokens":        `{"formatVersion":3,"createdAt":1,"caches":[]}`,
		"negative token":   `{"formatVersion":3,"createdAt":1,"tokens":[-1],"caches":[]}`,
		"huge token":       `{"formatVersion":3,"createdAt":1,"tokens":[4294967296],"caches":[]}`,
		"float token":      `{"formatVersion":3,"createdAt":1,"tokens":[1.5],"caches":[]}`,
		"unknown kind":     base(strings.Replace(kv, `"kv"`, `"latent-paged"`, 1)),
		"negative offset":  base(strings.Replace(kv, `"offset":2`, `"offset":-2`, 1)),
		"one tensor":       base(`{"kind":"kv","offset":2,"tensors":[{"off":0,"bytes":4,"shape":[1,1,2,1],"dtype":12,"hash":""}]}`),
		"bytes mismatch":   base(strings.Replace(kv, `"bytes":4`, `"bytes":5`, 1)),
		"negative dim":     base(strings.Replace(kv, `[1,1,2,1]`, `[1,-1,-2,1]`, 1)),
		"overflowing dims": base(strings.Replace(kv, `[1,1,2,1]`, `[4294967296,4294967296,4294967296,1]`, 1)),
		"unknown dtype":    base(strings.Replace(kv, `"dtype":12`, `"dtype":14`, 1)),
		"rotating no idx":  base(strings.Replace(kv, `"kind":"kv"`, `"kind":"rotating","maxSize":4`, 1)),
		"mro > offset":     base(strings.Replace(kv, `"offset":2`, `"offset":2,"minimumReusableOffset":3`, 1)),
		"paged no layout":  base(strings.Replace(kv, `"kind":"kv"`, `"kind":"paged"`, 1)),
		"metadata array":   `{"formatVersion":4,"createdAt":1,"tokens":[],"caches":[],"attachments":[{"schema":"s","metadata":{"a":[1]},"tensors":[]}]}`,
		"no schema":        `{"formatVersion":4,"createdAt":1,"tokens":[],"caches":[],"attachments":[{"metadata":{},"tensors":[]}]}`,
		"empty codec":      `{"formatVersion":3,"createdAt":1,"tokens":[],"caches":[],"codecProvider":""}`,
	} {
		var h Header
		if err := json.Unmarshal([]byte(js), &h); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
