package journal

import (
	"errors"
	"fmt"
)

// Errors of the journal. Operations wrap them with the operation and the
// segment's path (CorruptError carries the offset too).
var (
	// ErrCorrupt: committed records cannot be read back (a damaged record
	// that a later, valid record proves was durable, a gap between
	// segments, or a record that no longer verifies during Replay).
	// Recovery refuses to go on: skipping it would lose committed data.
	ErrCorrupt = errors.New("journal corrupt")
	// ErrFailed: an earlier write or sync failed. The journal is poisoned:
	// whether the failed records reached the disk is unknown, and a later
	// fdatasync may report success for pages the kernel already dropped
	// (fsyncgate), so every later Append and Sync fails. Reopen to recover
	// from what is on disk.
	ErrFailed = errors.New("journal failed earlier")
	// ErrClosed: the journal was closed.
	ErrClosed = errors.New("journal closed")
	// ErrTooLarge: a payload above Options.MaxPayload.
	ErrTooLarge = errors.New("journal record too large")
	// ErrNotAppended: Sync of a sequence number no Append has returned.
	ErrNotAppended = errors.New("journal sequence not appended")
)

// CorruptError names where recovery or replay met damaged committed data.
type CorruptError struct {
	Path   string // segment file
	Offset int64  // byte offset of the damaged record in Path
	Seq    uint64 // the sequence number expected there
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: %s offset %d (seq %d): %s", e.Path, e.Offset, e.Seq, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
