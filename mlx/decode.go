package mlx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// The wire types mirror the JSON with pointers where a field may be absent,
// so that decoding can tell "absent" from zero and the validator can require
// what each kind needs. They never leave this file.

type wireHeader struct {
	FormatVersion        *int             `json:"formatVersion"`
	CreatedAt            *int64           `json:"createdAt"`
	ModelID              string           `json:"modelId"`
	ConfigFingerprint    string           `json:"configFingerprint"`
	TokenizerHash        string           `json:"tokenizerHash"`
	NS                   string           `json:"ns"`
	GenerationCheckpoint *wireCheckpoint  `json:"generationCheckpoint"`
	Attachments          []wireAttachment `json:"attachments"`
	CodecProvider        *string          `json:"codecProvider"`
	Tokens               []int64          `json:"tokens"`
	Caches               []wireEntry      `json:"caches"`
}

type wireCheckpoint struct {
	Key                  *string `json:"key"`
	CacheNS              *string `json:"cacheNs"`
	OriginalPromptTokens *int64  `json:"originalPromptTokens"`
	GeneratedTokens      *int64  `json:"generatedTokens"`
	PendingToken         *int64  `json:"pendingToken"`
	Seed                 *int64  `json:"seed"`
	SeedWasExplicit      *bool   `json:"seedWasExplicit"`
}

type wireAttachment struct {
	Schema   *string    `json:"schema"`
	Metadata Metadata   `json:"metadata"`
	Tensors  []wireSlot `json:"tensors"`
}

type wireEntry struct {
	Kind                  *string    `json:"kind"`
	Offset                *int64     `json:"offset"`
	Idx                   *int64     `json:"idx"`
	MaxSize               *int64     `json:"maxSize"`
	GroupSize             *int64     `json:"groupSize"`
	Bits                  *int64     `json:"bits"`
	KBits                 *int64     `json:"kBits"`
	VBits                 *int64     `json:"vBits"`
	HeadDim               *int64     `json:"headDim"`
	KVLoraRank            *int64     `json:"kvLoraRank"`
	RopeHeadDim           *int64     `json:"ropeHeadDim"`
	DSAHeadDim            *int64     `json:"dsaHeadDim"`
	MaxTokens             *int64     `json:"maxTokens"`
	Tensors               []wireSlot `json:"tensors"`
	Paged                 *wirePaged `json:"paged"`
	MinimumReusableOffset *int64     `json:"minimumReusableOffset"`
}

type wirePaged struct {
	CapacityTokens *int64  `json:"capacityTokens"`
	BlockSize      *int64  `json:"blockSize"`
	BlockTable     []int64 `json:"blockTable"`
	NumBlocks      *int64  `json:"numBlocks"`
	HeadDim        *int64  `json:"headDim"`
	VHeadDim       *int64  `json:"vHeadDim"`
	DType          *int64  `json:"dtype"`
	Direct         *bool   `json:"direct"`
}

type wireSlot struct {
	Off    *int64     `json:"off"`
	Bytes  *int64     `json:"bytes"`
	Shape  []int64    `json:"shape"`
	DType  *int64     `json:"dtype"`
	Hash   *string    `json:"hash"`
	Blocks []BlockRef `json:"blocks"`
}

// UnmarshalJSON decodes a flat object of strings, numbers and booleans,
// keeping its key order.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*m = nil
		return nil
	}
	if tok != json.Delim('{') {
		return errors.New("metadata is not an object")
	}
	out := Metadata{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // object keys are always strings
		tok, err = d.Token()
		if err != nil {
			return err
		}
		var v any
		switch t := tok.(type) {
		case string, bool:
			v = t
		case json.Number:
			f, err := t.Float64()
			if err != nil || math.IsInf(f, 0) {
				return fmt.Errorf("metadata %q: number %s out of range", key, t)
			}
			v = f
		default:
			return fmt.Errorf("metadata %q: value is not a string, number or boolean", key)
		}
		out = append(out, MetaField{Key: key, Value: v})
	}
	*m = out
	return nil
}

// MarshalJSON encodes m with JS number formatting, in key order.
func (m Metadata) MarshalJSON() ([]byte, error) {
	a := Attachment{Metadata: m}
	e := jsonEncoder{}
	e.attachment(&a)
	if e.err != nil {
		return nil, e.err
	}
	// Cut {"schema":"","metadata": … ,"tensors":[]} down to the object.
	b := e.b[len(`{"schema":"","metadata":`) : len(e.b)-len(`,"tensors":[]}`)]
	return b, nil
}

// UnmarshalJSON decodes a header without validating it against the format;
// Parse does both.
func (h *Header) UnmarshalJSON(b []byte) error {
	var w wireHeader
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	v := validator{}
	v.header(&w, h)
	return v.err
}

// validator converts wire types to Header, checking field presence and the
// rules that concern the JSON alone. Checks that need the file (extents,
// sizes) are in Parse. The first failure sticks, with its path.
type validator struct {
	err error
}

func (v *validator) failf(check, format string, args ...any) {
	if v.err == nil {
		v.err = &FormatError{Check: check, Err: ErrMalformed, Detail: fmt.Sprintf(format, args...)}
	}
}

func (v *validator) need(check string, present bool) bool {
	if !present {
		v.failf(check, "missing")
	}
	return present
}

func (v *validator) nonNeg(check string, p *int64) int64 {
	if !v.need(check, p != nil) {
		return 0
	}
	if *p < 0 {
		v.failf(check, "negative value %d", *p)
		return 0
	}
	return *p
}

func (v *validator) header(w *wireHeader, h *Header) {
	if !v.need("formatVersion", w.FormatVersion != nil) ||
		!v.need("createdAt", w.CreatedAt != nil) ||
		!v.need("tokens", w.Tokens != nil) ||
		!v.need("caches", w.Caches != nil) {
		return
	}
	*h = Header{
		FormatVersion:     *w.FormatVersion,
		CreatedAt:         *w.CreatedAt,
		ModelID:           w.ModelID,
		ConfigFingerprint: w.ConfigFingerprint,
		TokenizerHash:     w.TokenizerHash,
		NS:                w.NS,
		Tokens:            make([]uint32, len(w.Tokens)),
		Caches:            make([]CacheEntry, len(w.Caches)),
	}
	if w.CodecProvider != nil {
		h.CodecProvider = *w.CodecProvider
		if h.CodecProvider == "" {
			v.failf("codecProvider", "empty")
		}
	}
	for i, t := range w.Tokens {
		if t < 0 || t > math.MaxUint32 {
			v.failf(fmt.Sprintf("tokens[%d]", i), "token id %d out of range", t)
			return
		}
		h.Tokens[i] = uint32(t)
	}
	if g := w.GenerationCheckpoint; g != nil {
		c := &GenerationCheckpoint{}
		ok := v.need("generationCheckpoint.key", g.Key != nil) &&
			v.need("generationCheckpoint.cacheNs", g.CacheNS != nil) &&
			v.need("generationCheckpoint.seedWasExplicit", g.SeedWasExplicit != nil) &&
			v.need("generationCheckpoint.pendingToken", g.PendingToken != nil) &&
			v.need("generationCheckpoint.seed", g.Seed != nil)
		if !ok {
			return
		}
		c.Key, c.CacheNS, c.SeedWasExplicit = *g.Key, *g.CacheNS, *g.SeedWasExplicit
		c.PendingToken, c.Seed = *g.PendingToken, *g.Seed
		c.OriginalPromptTokens = v.nonNeg("generationCheckpoint.originalPromptTokens", g.OriginalPromptTokens)
		c.GeneratedTokens = v.nonNeg("generationCheckpoint.generatedTokens", g.GeneratedTokens)
		h.GenerationCheckpoint = c
	}
	for i := range w.Caches {
		v.entry(fmt.Sprintf("caches[%d]", i), &w.Caches[i], &h.Caches[i])
	}
	if w.Attachments != nil {
		h.Attachments = make([]Attachment, len(w.Attachments))
		for i := range w.Attachments {
			wa, a := &w.Attachments[i], &h.Attachments[i]
			path := fmt.Sprintf("attachments[%d]", i)
			if !v.need(path+".schema", wa.Schema != nil) || !v.need(path+".tensors", wa.Tensors != nil) {
				return
			}
			a.Schema, a.Metadata = *wa.Schema, wa.Metadata
			if a.Metadata == nil {
				a.Metadata = Metadata{}
			}
			a.Tensors = v.slots(path, wa.Tensors)
		}
	}
}

func (v *validator) entry(path string, w *wireEntry, e *CacheEntry) {
	if !v.need(path+".kind", w.Kind != nil) || !v.need(path+".tensors", w.Tensors != nil) {
		return
	}
	e.Kind = Kind(*w.Kind)
	info, ok := kindInfo[e.Kind]
	if !ok {
		v.failf(path+".kind", "unknown cache kind %q", *w.Kind)
		return
	}
	e.Offset = v.nonNeg(path+".offset", w.Offset)
	get := func(name string, p *int64) int64 { return v.nonNeg(path+"."+name, p) }
	switch e.Kind {
	case KindRotating, KindRotatingQKV:
		e.Idx, e.MaxSize = get("idx", w.Idx), get("maxSize", w.MaxSize)
	case KindTurboQuant:
		e.KBits, e.VBits, e.HeadDim = get("kBits", w.KBits), get("vBits", w.VBits), get("headDim", w.HeadDim)
	case KindMLA, KindMLADSA, KindMTPMLA:
		e.KVLoraRank, e.RopeHeadDim, e.MaxTokens = get("kvLoraRank", w.KVLoraRank), get("ropeHeadDim", w.RopeHeadDim), get("maxTokens", w.MaxTokens)
		if e.Kind == KindMLADSA {
			e.DSAHeadDim = get("dsaHeadDim", w.DSAHeadDim)
		}
	case KindPaged:
		if !v.need(path+".paged", w.Paged != nil) {
			return
		}
		p := w.Paged
		e.Paged = &PagedLayout{
			CapacityTokens: get("paged.capacityTokens", p.CapacityTokens),
			BlockSize:      get("paged.blockSize", p.BlockSize),
			NumBlocks:      get("paged.numBlocks", p.NumBlocks),
			HeadDim:        get("paged.headDim", p.HeadDim),
			VHeadDim:       get("paged.vHeadDim", p.VHeadDim),
			DType:          get("paged.dtype", p.DType),
		}
		if v.need(path+".paged.direct", p.Direct != nil) {
			e.Paged.Direct = *p.Direct
		}
		if v.need(path+".paged.blockTable", p.BlockTable != nil) {
			for j, b := range p.BlockTable {
				if b < 0 {
					v.failf(fmt.Sprintf("%s.paged.blockTable[%d]", path, j), "negative page %d", b)
				}
			}
			e.Paged.BlockTable = p.BlockTable
		}
		if w.Bits != nil {
			e.Bits, e.GroupSize = get("bits", w.Bits), get("groupSize", w.GroupSize)
		}
		if w.KBits != nil {
			e.KBits, e.VBits = get("kBits", w.KBits), get("vBits", w.VBits)
		}
	}
	if e.Kind == KindQKV || e.Kind == KindRotatingQKV {
		e.GroupSize, e.Bits = get("groupSize", w.GroupSize), get("bits", w.Bits)
	}
	if w.MinimumReusableOffset != nil {
		m := get("minimumReusableOffset", w.MinimumReusableOffset)
		if m > e.Offset {
			v.failf(path+".minimumReusableOffset", "%d exceeds offset %d", m, e.Offset)
		}
		e.MinimumReusableOffset = &m
	}
	countOK := false
	for _, n := range info.tensors {
		countOK = countOK || n == len(w.Tensors)
	}
	if !countOK {
		v.failf(path+".tensors", "kind %s has %d tensors, want %v", e.Kind, len(w.Tensors), info.tensors)
		return
	}
	e.Tensors = v.slots(path, w.Tensors)
}

func (v *validator) slots(path string, ws []wireSlot) []Slot {
	out := make([]Slot, len(ws))
	for i := range ws {
		w, s := &ws[i], &out[i]
		p := fmt.Sprintf("%s.tensors[%d]", path, i)
		s.Off = v.nonNeg(p+".off", w.Off)
		s.Bytes = v.nonNeg(p+".bytes", w.Bytes)
		if !v.need(p+".shape", w.Shape != nil) || !v.need(p+".dtype", w.DType != nil) || !v.need(p+".hash", w.Hash != nil) {
			return out
		}
		s.Shape, s.Hash, s.Blocks = w.Shape, *w.Hash, w.Blocks
		if *w.DType < 0 || *w.DType > math.MaxInt32 || !DType(*w.DType).Valid() {
			v.failf(p+".dtype", "unknown dtype id %d", *w.DType)
			return out
		}
		s.DType = DType(*w.DType)
		n, ok := elements(s.Shape)
		if !ok {
			v.failf(p+".shape", "invalid shape %v", s.Shape)
			return out
		}
		size := int64(s.DType.Size())
		if n > math.MaxInt64/size || n*size != s.Bytes {
			v.failf(p+".bytes", "%d bytes do not match shape %v of %s (%d-byte items)", s.Bytes, s.Shape, s.DType, size)
		}
	}
	return out
}

// elements returns ∏shape, or false if a dimension is negative or the
// product overflows int64.
func elements(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}
