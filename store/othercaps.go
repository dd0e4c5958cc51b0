package store

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/kvfs/kvfs/safetensors"
)

// Other engines' files are parsed and planned within the same caps as a
// snapshot (caps.go), since a valid file may declare what a hostile one
// does: 200 million tokens in a llama.cpp preamble cost their parse 1.6 GB
// before any byte of KV, a transposed V block of a million one-byte
// channels a region each, a safetensors header 100 MB of JSON. Past a cap
// the file is cut by its content, with the reason noted and logged.

const (
	// maxPlanRows bounds the rows a file's plan cuts on their own: an 8B
	// model's transposed V has 32k, a 70B's 82k.
	maxPlanRows = 1 << 20
	// maxSTHeader bounds a safetensors header the store parses: mlx-lm's
	// prompt caches have a few kilobytes.
	maxSTHeader = 16 << 20
	// maxSTTokenRow bounds the row stTokens reads to stand tokens in.
	maxSTTokenRow = 64 << 20
)

// checkLlamaTokens reports an error if a llama.cpp state file declares
// more tokens than the cap, before it is parsed.
func (c snapshotCaps) checkLlamaTokens(src io.ReaderAt) error {
	var b [12]byte
	if _, err := src.ReadAt(b[:], 0); err != nil {
		return nil // the parser says why
	}
	if n := binary.LittleEndian.Uint32(b[8:]); int64(n) > int64(c.tokens) {
		return fmt.Errorf("%d tokens, over the cap of %d (store option MaxSnapshotTokens)", n, c.tokens)
	}
	return nil
}

// checkSTHeader reports an error if a safetensors header is longer than
// the store parses.
func checkSTHeader(src io.ReaderAt) error {
	var b [8]byte
	if _, err := src.ReadAt(b[:], 0); err != nil {
		return nil
	}
	if n := binary.LittleEndian.Uint64(b[:]); n > maxSTHeader {
		return fmt.Errorf("safetensors header of %d bytes, over the %d the store parses", n, maxSTHeader)
	}
	return nil
}

// checkSTTensors reports an error for more tensors than the slots cap.
func (c snapshotCaps) checkSTTensors(f *safetensors.File) error {
	maxSlots := c.slots
	if maxSlots <= 0 {
		maxSlots = DefaultMaxSnapshotSlots
	}
	if len(f.Tensors) > maxSlots {
		return fmt.Errorf("%d tensors, over the cap of %d (store option MaxSnapshotSlots)", len(f.Tensors), maxSlots)
	}
	return nil
}

// checkRows reports an error if a plan would cut more rows on their own
// than maxPlanRows.
func checkRows(slots []slotRows) error {
	var n int64
	for _, s := range slots {
		n += s.rows
	}
	if n > maxPlanRows {
		return fmt.Errorf("%d rows, over the %d the store cuts one by one", n, maxPlanRows)
	}
	return nil
}
