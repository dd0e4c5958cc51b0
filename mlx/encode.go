package mlx

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// MarshalJSON encodes h exactly as the engine's JSON.stringify does
// (FORMAT.md §2, §8): keys in the engine's order per kind, optional fields
// omitted where JS leaves them undefined, "ns" always present, integers in
// plain decimal, and strings escaped as JS escapes them (no HTML escaping,
// U+2028 and U+2029 left as they are).
func (h *Header) MarshalJSON() ([]byte, error) {
	e := jsonEncoder{b: make([]byte, 0, 256+8*len(h.Tokens))}
	e.header(h)
	if e.err != nil {
		return nil, e.err
	}
	return e.b, nil
}

// jsonEncoder appends JS-compatible JSON. The first error sticks.
type jsonEncoder struct {
	b   []byte
	err error
}

func (e *jsonEncoder) raw(s string) { e.b = append(e.b, s...) }

// key writes the separator (unless first) and a quoted key.
func (e *jsonEncoder) key(k string, first bool) {
	if !first {
		e.b = append(e.b, ',')
	}
	e.str(k)
	e.b = append(e.b, ':')
}

func (e *jsonEncoder) int(v int64) { e.b = strconv.AppendInt(e.b, v, 10) }

func (e *jsonEncoder) bool(v bool) { e.b = strconv.AppendBool(e.b, v) }

// number formats a JS number as Number.prototype.toString does, which is
// what encoding/json also follows for float64.
func (e *jsonEncoder) number(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		e.fail(fmt.Errorf("mlx: cannot encode %v as a JSON number", f))
		return
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	start := len(e.b)
	e.b = strconv.AppendFloat(e.b, f, format, -1, 64)
	if format == 'e' {
		// JS writes 1e-7, Go 1e-07.
		n := len(e.b)
		if n-start >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
			e.b[n-2] = e.b[n-1]
			e.b = e.b[:n-1]
		}
	}
}

func (e *jsonEncoder) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// str writes s as JSON.stringify writes a string: only '"', '\\' and
// control characters are escaped, with \b \f \n \r \t short forms and
// lowercase \u00xx otherwise. Invalid UTF-8 (which a JS string cannot hold)
// is written as U+FFFD, as TextEncoder would.
func (e *jsonEncoder) str(s string) {
	const hex = "0123456789abcdef"
	e.b = append(e.b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				e.b = append(e.b, "\uFFFD"...)
			} else {
				e.b = append(e.b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"':
			e.b = append(e.b, '\\', '"')
		case '\\':
			e.b = append(e.b, '\\', '\\')
		case '\b':
			e.b = append(e.b, '\\', 'b')
		case '\f':
			e.b = append(e.b, '\\', 'f')
		case '\n':
			e.b = append(e.b, '\\', 'n')
		case '\r':
			e.b = append(e.b, '\\', 'r')
		case '\t':
			e.b = append(e.b, '\\', 't')
		default:
			if c < 0x20 {
				e.b = append(e.b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				e.b = append(e.b, c)
			}
		}
		i++
	}
	e.b = append(e.b, '"')
}

func (e *jsonEncoder) header(h *Header) {
	e.raw("{")
	e.key("formatVersion", true)
	e.int(int64(h.FormatVersion))
	e.key("createdAt", false)
	e.int(h.CreatedAt)
	e.key("modelId", false)
	e.str(h.ModelID)
	e.key("configFingerprint", false)
	e.str(h.ConfigFingerprint)
	e.key("tokenizerHash", false)
	e.str(h.TokenizerHash)
	e.key("ns", false)
	e.str(h.NS)
	if g := h.GenerationCheckpoint; g != nil {
		e.key("generationCheckpoint", false)
		e.raw("{")
		e.key("key", true)
		e.str(g.Key)
		e.key("cacheNs", false)
		e.str(g.CacheNS)
		e.key("originalPromptTokens", false)
		e.int(g.OriginalPromptTokens)
		e.key("generatedTokens", false)
		e.int(g.GeneratedTokens)
		e.key("pendingToken", false)
		e.int(g.PendingToken)
		e.key("seed", false)
		e.int(g.Seed)
		e.key("seedWasExplicit", false)
		e.bool(g.SeedWasExplicit)
		e.raw("}")
	}
	if h.Attachments != nil {
		e.key("attachments", false)
		e.raw("[")
		for i := range h.Attachments {
			if i > 0 {
				e.raw(",")
			}
			e.attachment(&h.Attachments[i])
		}
		e.raw("]")
	}
	if h.CodecProvider != "" {
		e.key("codecProvider", false)
		e.str(h.CodecProvider)
	}
	e.key("tokens", false)
	e.raw("[")
	for i, t := range h.Tokens {
		if i > 0 {
			e.raw(",")
		}
		e.int(int64(t))
	}
	e.raw("]")
	e.key("caches", false)
	e.raw("[")
	for i := range h.Caches {
		if i > 0 {
			e.raw(",")
		}
		e.entry(&h.Caches[i])
	}
	e.raw("]}")
}

func (e *jsonEncoder) attachment(a *Attachment) {
	e.raw("{")
	e.key("schema", true)
	e.str(a.Schema)
	e.key("metadata", false)
	e.raw("{")
	for i, f := range a.Metadata {
		e.key(f.Key, i == 0)
		switch v := f.Value.(type) {
		case string:
			e.str(v)
		case float64:
			e.number(v)
		case bool:
			e.bool(v)
		default:
			e.fail(fmt.Errorf("mlx: attachment %q metadata %q: unsupported value type %T", a.Schema, f.Key, f.Value))
		}
	}
	e.raw("}")
	e.key("tensors", false)
	e.slots(a.Tensors)
	e.raw("}")
}

// entry writes a cache entry with the key order of FORMAT.md §2.2.
func (e *jsonEncoder) entry(c *CacheEntry) {
	if !c.Kind.Known() {
		e.fail(fmt.Errorf("mlx: cannot encode unknown cache kind %q", c.Kind))
		return
	}
	e.raw("{")
	e.key("kind", true)
	e.str(string(c.Kind))
	e.key("offset", false)
	e.int(c.Offset)
	kv := func(k string, v int64) { e.key(k, false); e.int(v) }
	switch c.Kind {
	case KindRotating:
		kv("idx", c.Idx)
		kv("maxSize", c.MaxSize)
	case KindQKV:
		kv("groupSize", c.GroupSize)
		kv("bits", c.Bits)
	case KindRotatingQKV:
		kv("idx", c.Idx)
		kv("maxSize", c.MaxSize)
		kv("groupSize", c.GroupSize)
		kv("bits", c.Bits)
	case KindTurboQuant:
		kv("kBits", c.KBits)
		kv("vBits", c.VBits)
		kv("headDim", c.HeadDim)
	case KindMLA, KindMLADSA, KindMTPMLA:
		kv("kvLoraRank", c.KVLoraRank)
		kv("ropeHeadDim", c.RopeHeadDim)
		if c.Kind == KindMLADSA {
			kv("dsaHeadDim", c.DSAHeadDim)
		}
		kv("maxTokens", c.MaxTokens)
	}
	e.key("tensors", false)
	e.slots(c.Tensors)
	if c.Kind == KindPaged {
		// {kind, offset, tensors, ...quantization, ...turbo, paged}
		if c.Bits != 0 {
			kv("bits", c.Bits)
			kv("groupSize", c.GroupSize)
		}
		if c.KBits != 0 {
			kv("kBits", c.KBits)
			kv("vBits", c.VBits)
		}
		p := c.Paged
		if p == nil {
			e.fail(errors.New("mlx: paged cache entry without a paged layout"))
			return
		}
		e.key("paged", false)
		e.raw("{")
		e.key("capacityTokens", true)
		e.int(p.CapacityTokens)
		kv("blockSize", p.BlockSize)
		e.key("blockTable", false)
		e.ints(p.BlockTable)
		kv("numBlocks", p.NumBlocks)
		kv("headDim", p.HeadDim)
		kv("vHeadDim", p.VHeadDim)
		kv("dtype", p.DType)
		e.key("direct", false)
		e.bool(p.Direct)
		e.raw("}")
	}
	if c.MinimumReusableOffset != nil {
		kv("minimumReusableOffset", *c.MinimumReusableOffset)
	}
	e.raw("}")
}

func (e *jsonEncoder) ints(v []int64) {
	e.raw("[")
	for i, x := range v {
		if i > 0 {
			e.raw(",")
		}
		e.int(x)
	}
	e.raw("]")
}

func (e *jsonEncoder) slots(s []Slot) {
	e.raw("[")
	for i := range s {
		if i > 0 {
			e.raw(",")
		}
		t := &s[i]
		e.raw("{")
		e.key("off", true)
		e.int(t.Off)
		e.key("bytes", false)
		e.int(t.Bytes)
		e.key("shape", false)
		e.ints(t.Shape)
		e.key("dtype", false)
		e.int(int64(t.DType))
		e.key("hash", false)
		e.str(t.Hash)
		if t.Blocks != nil {
			e.key("blocks", false)
			e.raw("[")
			for j, b := range t.Blocks {
				if j > 0 {
					e.raw(",")
				}
				e.raw("{")
				e.key("hash", true)
				e.str(b.Hash)
				e.key("bytes", false)
				e.int(b.Bytes)
				e.raw("}")
			}
			e.raw("]")
		}
		e.raw("}")
	}
	e.raw("]")
}
