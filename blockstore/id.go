package blockstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// ID names a chunk: the sha256 of its bytes. sha256, not a faster hash,
// because engine blocks are named by sha256 and a chunk that is a whole
// block then shares the block's name.
type ID [32]byte

// Sum returns the ID of b.
func Sum(b []byte) ID { return sha256.Sum256(b) }

// String returns the ID as 64 lowercase hex digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first 12 hex digits, for logs.
func (id ID) Short() string { return hex.EncodeToString(id[:6]) }

// ParseID parses 64 lowercase or uppercase hex digits.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 64 {
		return id, fmt.Errorf("chunk id %q: want 64 hex digits", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("chunk id %q: %w", s, err)
	}
	return id, nil
}

// Loc is where a chunk's bytes lie: Len bytes at Off of pack Pack.
type Loc struct {
	Pack uint32
	Off  int64
	Len  int64
}

// End is the offset just past the chunk.
func (l Loc) End() int64 { return l.Off + l.Len }
