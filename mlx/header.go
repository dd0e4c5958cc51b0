package mlx

import "slices"

// Header is the JSON header of a snapshot, formats 2 to 5 (FORMAT.md §2 and
// §7). Field order here is the engine's emission order; Header.MarshalJSON
// reproduces its JSON byte for byte.
type Header struct {
	FormatVersion int
	CreatedAt     int64 // ms since the epoch
	// ModelID, ConfigFingerprint and TokenizerHash identify the store; the
	// SSD store always writes them, so the encoder always emits them.
	ModelID           string
	ConfigFingerprint string
	TokenizerHash     string
	NS                string // always emitted, "" for the base model
	// GenerationCheckpoint is set only on in-flight generation checkpoints.
	GenerationCheckpoint *GenerationCheckpoint
	// Attachments is method companion state (format 4, or 5); nil if absent.
	Attachments []Attachment
	// CodecProvider is the codec table id; "" means absent, which readers
	// take as DefaultCodecProvider.
	CodecProvider string
	Tokens        []uint32
	Caches        []CacheEntry
}

// DefaultCodecProvider is the codec table of the MLX backend, and what an
// absent codecProvider means.
const DefaultCodecProvider = "mlx-cache-v3"

// GenerationCheckpoint is the in-flight generation state of a checkpoint.
type GenerationCheckpoint struct {
	Key                  string
	CacheNS              string
	OriginalPromptTokens int64
	GeneratedTokens      int64
	PendingToken         int64
	Seed                 int64
	SeedWasExplicit      bool
}

// Attachment is one method's companion state in a format 4 or 5 file.
type Attachment struct {
	Schema   string
	Metadata Metadata
	Tensors  []Slot
}

// Metadata is an attachment's flat JSON object, kept in key order because
// the engine's JSON.stringify emits insertion order. Values are string,
// float64 (a JS number) or bool.
type Metadata []MetaField

// MetaField is one key of an attachment's metadata.
type MetaField struct {
	Key   string
	Value any // string, float64 or bool
}

// Kind is a cache entry's kind (FORMAT.md §7).
type Kind string

// The cache kinds of codec mlx-cache-v3.
const (
	KindKV          Kind = "kv"
	KindRotating    Kind = "rotating"
	KindQKV         Kind = "qkv"
	KindRotatingQKV Kind = "rotating-qkv"
	KindSSM         Kind = "ssm"
	KindTurboQuant  Kind = "turboquant"
	KindPaged       Kind = "paged"
	KindMLA         Kind = "mla"
	KindMLADSA      Kind = "mla-dsa"
	KindMTPMLA      Kind = "mtp-mla"
)

// kindInfo describes what the format fixes about each kind: how many tensors
// an entry has and which axis of each grows with the token count.
var kindInfo = map[Kind]struct {
	tensors   []int // allowed tensor counts
	tokenAxis int   // axis that grows with offset; -1 if none
}{
	KindKV:          {[]int{2}, 2},
	KindRotating:    {[]int{2}, 2},
	KindQKV:         {[]int{6}, 2},
	KindRotatingQKV: {[]int{6}, 2},
	KindSSM:         {[]int{2}, -1},
	KindTurboQuant:  {[]int{5}, 2},
	KindPaged:       {[]int{2, 6}, -1},
	KindMLA:         {[]int{2}, 1},
	KindMLADSA:      {[]int{3}, 1},
	KindMTPMLA:      {[]int{2}, 1},
}

// Known reports whether k is a kind of codec mlx-cache-v3.
func (k Kind) Known() bool { _, ok := kindInfo[k]; return ok }

// CacheEntry is one cache layer (caches[i]). Which optional fields are
// emitted, and in which order, depends on Kind (FORMAT.md §2.2).
type CacheEntry struct {
	Kind   Kind
	Offset int64 // tokens covered

	Idx     int64 // rotating kinds: ring write index
	MaxSize int64 // rotating kinds: window size

	GroupSize int64 // qkv kinds, quantized paged
	Bits      int64 // qkv kinds, quantized paged (0: not quantized)

	KBits   int64 // turboquant, TurboQuant paged (0: not TurboQuant)
	VBits   int64 // turboquant, TurboQuant paged
	HeadDim int64 // turboquant

	KVLoraRank  int64 // mla kinds
	RopeHeadDim int64 // mla kinds
	DSAHeadDim  int64 // mla-dsa only
	MaxTokens   int64 // mla kinds

	Tensors []Slot
	Paged   *PagedLayout // paged only

	// MinimumReusableOffset is the shortest prefix this entry may be trimmed
	// to; nil if absent (FORMAT.md §2.2 gives the default per kind).
	MinimumReusableOffset *int64
}

// MinReusable is the effective minimumReusableOffset: the field when set,
// otherwise Offset for turboquant (old TurboQuant files are reusable only
// at full length) and 0 for every other kind.
func (e *CacheEntry) MinReusable() int64 {
	switch {
	case e.MinimumReusableOffset != nil:
		return *e.MinimumReusableOffset
	case e.Kind == KindTurboQuant:
		return e.Offset
	}
	return 0
}

// PagedLayout is a paged entry's page table (FORMAT.md §2.2, §7).
type PagedLayout struct {
	CapacityTokens int64
	BlockSize      int64
	BlockTable     []int64
	NumBlocks      int64
	HeadDim        int64
	VHeadDim       int64
	DType          int64
	Direct         bool
}

// Slot describes one tensor (tensors[j]).
type Slot struct {
	// Off is the byte offset relative to dataStart in the whole layout. In
	// format 5 it keeps the planned whole-layout value and is ignored.
	Off   int64
	Bytes int64 // ∏Shape × item size
	Shape []int64
	DType DType
	// Hash is Bun.hash of the tensor bytes as 16 hex digits (format 3+;
	// unpadded in format 2), or "" in format 5.
	Hash string
	// Blocks lists a format-5 tensor's blocks in byte order; nil if absent.
	Blocks []BlockRef
}

// BlockRef names one content-addressed block of a format-5 tensor.
type BlockRef struct {
	Hash  string // lowercase hex sha256 of the block
	Bytes int64
}

// Slots returns pointers to every tensor slot in reading order: each cache
// entry's tensors, then each attachment's. Writers and readers index tensors
// by this flattened order.
func (h *Header) Slots() []*Slot {
	var out []*Slot
	for i := range h.Caches {
		for j := range h.Caches[i].Tensors {
			out = append(out, &h.Caches[i].Tensors[j])
		}
	}
	for i := range h.Attachments {
		for j := range h.Attachments[i].Tensors {
			out = append(out, &h.Attachments[i].Tensors[j])
		}
	}
	return out
}

// Clone returns a deep copy of h.
func (h *Header) Clone() *Header {
	c := *h
	if h.GenerationCheckpoint != nil {
		g := *h.GenerationCheckpoint
		c.GenerationCheckpoint = &g
	}
	c.Tokens = slices.Clone(h.Tokens)
	c.Caches = make([]CacheEntry, len(h.Caches))
	for i, e := range h.Caches {
		e.Tensors = cloneSlots(e.Tensors)
		if e.Paged != nil {
			p := *e.Paged
			p.BlockTable = slices.Clone(p.BlockTable)
			e.Paged = &p
		}
		if e.MinimumReusableOffset != nil {
			m := *e.MinimumReusableOffset
			e.MinimumReusableOffset = &m
		}
		c.Caches[i] = e
	}
	if h.Attachments != nil {
		c.Attachments = make([]Attachment, len(h.Attachments))
		for i, a := range h.Attachments {
			a.Metadata = slices.Clone(a.Metadata)
			a.Tensors = cloneSlots(a.Tensors)
			c.Attachments[i] = a
		}
	}
	return &c
}

func cloneSlots(s []Slot) []Slot {
	if s == nil {
		return nil
	}
	out := make([]Slot, len(s))
	for i, t := range s {
		t.Shape = slices.Clone(t.Shape)
		if t.Blocks != nil {
			t.Blocks = slices.Clone(t.Blocks)
		}
		out[i] = t
	}
	return out
}
