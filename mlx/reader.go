package mlx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
)

// Snapshot is a parsed snapshot file: its prefix and validated header.
// Parse checks that every number in the header is consistent with the file,
// so a Snapshot's slot extents can be read without further checks.
type Snapshot struct {
	Name   string // as given to Parse, used in errors
	Size   int64  // file size
	Prefix Prefix
	Header *Header
	// HeaderJSON is the header exactly as stored (headerLen bytes).
	HeaderJSON []byte
}

// Blocks reports whether the snapshot is in the blocks layout (format 5):
// tensors live in content-addressed block files, not in this file.
func (s *Snapshot) Blocks() bool { return s.Header.FormatVersion == 5 }

// DataStart is the absolute offset of the tensor data region.
func (s *Snapshot) DataStart() int64 { return int64(s.Prefix.DataStart) }

// LogicalBytes is the sum of all tensor sizes.
func (s *Snapshot) LogicalBytes() int64 {
	var n int64
	for _, t := range s.Header.Slots() {
		n += t.Bytes
	}
	return n
}

var (
	blockHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hash16RE    = regexp.MustCompile(`^[0-9a-f]{16}$`)
	hashV2RE    = regexp.MustCompile(`^[0-9a-f]{1,16}$`)
)

// ReadFile parses the snapshot at path.
func ReadFile(path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return Parse(f, fi.Size(), path)
}

// Parse reads and validates the prefix and header of a snapshot of the given
// size. It makes the engine's checks (FORMAT.md §4.5) and stricter ones:
// dataStart consistent with headerLen and the size, a header of at most
// MaxHeaderLen bytes, every tensor's bytes equal to ∏shape × item size, every
// whole-layout tensor inside the file and not overlapping another, every
// block reference well-formed and summing to its tensor. It allocates only
// the header, after checking its length against the file size. Every error
// is a *FormatError naming name and the check that failed.
func Parse(r io.ReaderAt, size int64, name string) (*Snapshot, error) {
	s, err := parse(r, size)
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) {
			fe = &FormatError{Check: "read", Err: err}
		}
		fe.File = name
		return nil, fe
	}
	s.Name = name
	return s, nil
}

func malformed(check, format string, args ...any) error {
	return &FormatError{Check: check, Err: ErrMalformed, Detail: fmt.Sprintf(format, args...)}
}

func parse(r io.ReaderAt, size int64) (*Snapshot, error) {
	var pb [PrefixLen]byte
	n, err := r.ReadAt(pb[:min(int64(PrefixLen), max(size, 0))], 0)
	if n < PrefixLen {
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return nil, &FormatError{Check: "read prefix", Err: err}
		}
		perr := new(Prefix).UnmarshalBinary(pb[:n])
		if perr == nil {
			perr = ErrTruncatedPrefix
		}
		return nil, &FormatError{Check: "prefix", Err: perr}
	}
	s := &Snapshot{Size: size}
	if err := s.Prefix.UnmarshalBinary(pb[:]); err != nil {
		return nil, &FormatError{Check: "prefix", Err: err}
	}
	p := s.Prefix
	if p.HeaderLen > MaxHeaderLen {
		return nil, malformed("headerLen", "%d bytes exceeds the %d-byte limit", p.HeaderLen, MaxHeaderLen)
	}
	end := int64(PrefixLen) + int64(p.HeaderLen)
	if end > size {
		return nil, malformed("headerLen", "header ends at %d, past the end of the %d-byte file", end, size)
	}
	s.HeaderJSON = make([]byte, p.HeaderLen)
	if _, err := r.ReadAt(s.HeaderJSON, PrefixLen); err != nil {
		return nil, &FormatError{Check: "read header", Err: err}
	}
	if got := Hash(s.HeaderJSON); got != p.HeaderHash {
		return nil, &FormatError{Check: "headerHash", Err: ErrHeaderHash,
			Detail: fmt.Sprintf("header hashes to %016x, prefix says %016x", got, p.HeaderHash)}
	}
	s.Header = new(Header)
	if err := json.Unmarshal(s.HeaderJSON, s.Header); err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, &FormatError{Check: "header JSON", Err: ErrMalformed, Detail: err.Error()}
	}
	h := s.Header
	switch v := h.FormatVersion; {
	case v < 2 || v > 5:
		return nil, &FormatError{Check: "formatVersion", Err: ErrVersion, Detail: fmt.Sprint(v)}
	case v == 5:
		if int64(p.DataStart) != end {
			return nil, malformed("dataStart", "blocks layout: %d, want 26 + headerLen = %d", p.DataStart, end)
		}
		if size != end {
			return nil, malformed("size", "blocks layout: file is %d bytes, want dataStart = %d", size, end)
		}
	default:
		if int64(p.DataStart) != AlignUp(end) {
			return nil, malformed("dataStart", "whole layout: %d, want alignUp(26 + headerLen) = %d", p.DataStart, AlignUp(end))
		}
		if size < int64(p.DataStart) {
			return nil, malformed("size", "file is %d bytes, shorter than dataStart %d", size, p.DataStart)
		}
		if h.Attachments != nil && v < 4 {
			return nil, malformed("attachments", "present in format %d", v)
		}
	}
	if err := checkSlots(s); err != nil {
		return nil, err
	}
	return s, nil
}

// checkSlots checks each tensor against the layout: whole-layout extents
// inside the file and disjoint, format-5 block lists well-formed.
func checkSlots(s *Snapshot) error {
	h := s.Header
	type extent struct {
		off, end int64
		name     string
	}
	var extents []extent
	dataLen := s.Size - s.DataStart()
	for i, t := range h.Slots() {
		name := fmt.Sprintf("slot %d", i)
		switch {
		case h.FormatVersion == 5:
			if t.Hash != "" {
				return malformed(name+".hash", "format 5 tensor hash %q, want \"\"", t.Hash)
			}
			if t.Blocks == nil {
				return malformed(name+".blocks", "missing")
			}
			var sum int64
			for j, b := range t.Blocks {
				bn := fmt.Sprintf("%s.blocks[%d]", name, j)
				if !blockHashRE.MatchString(b.Hash) {
					return malformed(bn+".hash", "%q is not 64 lowercase hex digits", b.Hash)
				}
				if b.Bytes <= 0 || b.Bytes > t.Bytes-sum {
					return malformed(bn+".bytes", "%d bytes at tensor offset %d of %d", b.Bytes, sum, t.Bytes)
				}
				sum += b.Bytes
			}
			if sum != t.Bytes {
				return malformed(name+".blocks", "blocks cover %d of %d bytes", sum, t.Bytes)
			}
		default:
			if t.Blocks != nil {
				return malformed(name+".blocks", "present in format %d", h.FormatVersion)
			}
			re := hash16RE
			if h.FormatVersion == 2 {
				re = hashV2RE
			}
			if !re.MatchString(t.Hash) {
				return malformed(name+".hash", "%q is not a tensor hash", t.Hash)
			}
			// An empty tensor reads nothing; the planner may place it
			// past the last byte the writer wrote.
			if t.Bytes == 0 {
				continue
			}
			if t.Off > dataLen || t.Bytes > dataLen-t.Off {
				return malformed(name+".off", "tensor [%d, +%d) extends past the data region of %d bytes", t.Off, t.Bytes, dataLen)
			}
			extents = append(extents, extent{t.Off, t.Off + t.Bytes, name})
		}
	}
	slices.SortFunc(extents, func(a, b extent) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	})
	for i := 1; i < len(extents); i++ {
		if extents[i].off < extents[i-1].end {
			return malformed(extents[i].name+".off", "overlaps %s", extents[i-1].name)
		}
	}
	return nil
}
