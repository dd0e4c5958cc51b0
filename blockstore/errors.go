package blockstore

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt: a chunk's bytes do not hash to its ID.
	ErrCorrupt = errors.New("chunk corrupt")
	// ErrShort: a pack ends before a chunk that the index places in it.
	ErrShort = errors.New("chunk extends past the end of its pack")
)

// ChunkError names the chunk and the place where reading it failed.
type ChunkError struct {
	Pack string // pack file path
	ID   ID
	Loc  Loc
	Err  error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %s at %s offset %d (+%d): %v", e.ID, e.Pack, e.Loc.Off, e.Loc.Len, e.Err)
}

func (e *ChunkError) Unwrap() error { return e.Err }
