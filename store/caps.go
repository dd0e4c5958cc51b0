package store

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/kvfs/kvfs/mlx"
)

// A snapshot's token list and block references are indexed (the snaps
// bucket holds the tokens for parent lookups, pins and blob records one
// entry per block), and a header is parsed whole, in memory, to find them.
// A valid header of 20 million tokens cost the daemon 820 MB to store and
// the index 80 MB; 200,000 block references grew the index by 70 MB. So
// the store indexes a snapshot only up to these caps; a larger one is
// stored as a plain file (its bytes byte-exact, without row
// deduplication, parent lookups or blob pins), with the reason noted and
// logged.
//
// The defaults are far above what real engines write (FORMAT.md): the
// longest contexts of current models are about 1M tokens, and with the
// default 1 MiB blocks a format-5 manifest lists about one reference per
// MiB of cache, cut per row: Llama-3-70B at 128k tokens (80 layers, 8 KV
// heads, rows of 32 MiB) lists 41k; 64k references address 64 GiB of
// cache at the least.
//
// The tensors (slots) are capped too: each costs the whole view of
// /.kvfs/whole a hash and an entry, and a header of 100,000 empty tensors
// is within the other caps. Engines write two per layer and attention
// kind: a few hundred.
const (
	DefaultMaxSnapshotTokens    = 1 << 20
	DefaultMaxSnapshotBlockRefs = 1 << 16
	DefaultMaxSnapshotSlots     = 1 << 16
)

// Header bytes per token and per block reference at most: a token id is
// at most 10 digits and a comma; a reference is {"hash":"<64 hex>",
// "bytes":<up to 19 digits>}, and a comma.
const (
	headerBytesPerToken    = 11
	headerBytesPerBlockRef = 110
	headerBytesOther       = 1 << 20 // everything else of a header
)

// snapshotCaps bound what the store indexes of one snapshot.
type snapshotCaps struct {
	tokens, blockRefs int
	slots             int // 0: DefaultMaxSnapshotSlots
}

// headerBytes is the longest header that can hold no more than the caps
// allow: longer ones are refused before they are parsed, so that a hostile
// header never costs its parse.
func (c snapshotCaps) headerBytes() int64 {
	return int64(c.tokens)*headerBytesPerToken + int64(c.blockRefs)*headerBytesPerBlockRef + headerBytesOther
}

// checkHeaderLen reads the prefix of src and reports an error if its
// header is too long to be within the caps. A prefix that cannot be read
// is left to the parser, which says why.
func (c snapshotCaps) checkHeaderLen(src io.ReaderAt) error {
	var pb [mlx.PrefixLen]byte
	if _, err := src.ReadAt(pb[:], 0); err != nil {
		return nil
	}
	n := int64(binary.LittleEndian.Uint32(pb[len(mlx.Magic):]))
	if n > c.headerBytes() {
		return fmt.Errorf("header of %d bytes is over the %d that %d tokens and %d block references need (store options MaxSnapshotTokens, MaxSnapshotBlockRefs)",
			n, c.headerBytes(), c.tokens, c.blockRefs)
	}
	return nil
}

// check reports an error if a parsed snapshot lists more tokens or block
// references than the caps.
func (c snapshotCaps) check(snap *mlx.Snapshot) error {
	if n := len(snap.Header.Tokens); n > c.tokens {
		return fmt.Errorf("%d tokens, over the cap of %d (store option MaxSnapshotTokens)", n, c.tokens)
	}
	slots := snap.Header.Slots()
	maxSlots := c.slots
	if maxSlots <= 0 {
		maxSlots = DefaultMaxSnapshotSlots
	}
	if len(slots) > maxSlots {
		return fmt.Errorf("%d tensors, over the cap of %d (store option MaxSnapshotSlots)", len(slots), maxSlots)
	}
	refs := 0
	for _, t := range slots {
		refs += len(t.Blocks)
	}
	if refs > c.blockRefs {
		return fmt.Errorf("%d block references, over the cap of %d (store option MaxSnapshotBlockRefs)", refs, c.blockRefs)
	}
	return nil
}
