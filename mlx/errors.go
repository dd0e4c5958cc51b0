package mlx

import (
	"errors"
	"fmt"
)

// Errors a reader returns, grouped by what failed. Every error from Parse
// and Verify is a *FormatError that wraps one of these, so callers decide
// with errors.Is and users read the file and the check in the message.
var (
	// ErrBadMagic: the file does not start with the format 2-5 magic.
	ErrBadMagic = errors.New("not an mlx-bun KV snapshot (formats 2-5 start with the magic MLXBUNKV2)")
	// ErrV1: the file is in the experimental format 1, which is not read.
	ErrV1 = errors.New("format 1 (MLXBUNKV1) is not supported")
	// ErrTruncatedPrefix: the file ends inside the 26-byte prefix.
	ErrTruncatedPrefix = errors.New("file shorter than the 26-byte prefix")
	// ErrHeaderHash: the header bytes do not hash to the prefix's headerHash.
	ErrHeaderHash = errors.New("header hash mismatch")
	// ErrVersion: formatVersion is not 2, 3, 4 or 5.
	ErrVersion = errors.New("unsupported format version")
	// ErrMalformed: the header parses but breaks a rule of the format
	// (sizes, extents, kinds, shapes, block lists).
	ErrMalformed = errors.New("malformed snapshot")
	// ErrChecksum: tensor or block bytes do not match their recorded hash.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrNotTrimmable: a cache cannot be cut to a shorter token prefix.
	ErrNotTrimmable = errors.New("not trimmable")
)

// FormatError reports which check failed on which file.
type FormatError struct {
	File  string // the file's name as given to the reader
	Check string // the check that failed, e.g. "caches[3].tensors[1]"
	Err   error  // one of the sentinel errors above, or an I/O error
	// Detail says what was found, e.g. "bytes 100 != 4 x 8 x 2".
	Detail string
}

func (e *FormatError) Error() string {
	msg := fmt.Sprintf("%s: %s: %v", e.File, e.Check, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *FormatError) Unwrap() error { return e.Err }
