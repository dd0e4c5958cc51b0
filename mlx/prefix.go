package mlx

import (
	"bytes"
	"encoding/binary"
)

// File prefix constants (FORMAT.md §1).
const (
	// Magic opens every file of formats 2 to 5; the version is in the JSON.
	Magic = "MLXBUNKV2\n"
	// MagicV1 opened the experimental format 1, which no reader accepts.
	MagicV1 = "MLXBUNKV1\n"
	// PrefixLen is the size of the fixed prefix: magic, headerLen,
	// dataStart and headerHash.
	PrefixLen = 26
	// Align is the whole layout's tensor alignment, the arm64 page size.
	Align = 16384
	// MaxHeaderLen bounds the JSON header a reader accepts. The largest
	// headers (128k tokens of blocks-layout manifests for a deep model) are
	// a few MiB; 64 MiB leaves room without letting a hostile length drive
	// an allocation.
	MaxHeaderLen = 64 << 20
)

// Prefix is the fixed 26-byte start of a snapshot file.
type Prefix struct {
	HeaderLen  uint32 // byte length of the JSON header
	DataStart  uint32 // absolute offset of the tensor data (whole layout) or the file size (blocks layout)
	HeaderHash uint64 // Bun.hash of the JSON header bytes
}

// AppendBinary appends the encoded prefix to b.
func (p Prefix) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint32(b, p.HeaderLen)
	b = binary.LittleEndian.AppendUint32(b, p.DataStart)
	b = binary.LittleEndian.AppendUint64(b, p.HeaderHash)
	return b, nil
}

// MarshalBinary returns the 26 encoded bytes.
func (p Prefix) MarshalBinary() ([]byte, error) { return p.AppendBinary(make([]byte, 0, PrefixLen)) }

// UnmarshalBinary decodes a prefix. It fails with ErrBadMagic for anything
// that is not a format 2-5 file (a v1 file is named as such) and with
// ErrMalformed when b is shorter than PrefixLen.
func (p *Prefix) UnmarshalBinary(b []byte) error {
	if len(b) < len(Magic) {
		return ErrTruncatedPrefix
	}
	switch {
	case bytes.Equal(b[:len(Magic)], []byte(MagicV1)):
		return ErrV1
	case !bytes.Equal(b[:len(Magic)], []byte(Magic)):
		return ErrBadMagic
	case len(b) < PrefixLen:
		return ErrTruncatedPrefix
	}
	p.HeaderLen = binary.LittleEndian.Uint32(b[10:])
	p.DataStart = binary.LittleEndian.Uint32(b[14:])
	p.HeaderHash = binary.LittleEndian.Uint64(b[18:])
	return nil
}

// AlignUp rounds n up to a multiple of Align.
func AlignUp(n int64) int64 { return (n + Align - 1) / Align * Align }
