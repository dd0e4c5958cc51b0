package manifest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// Inode records are binary, because names are bytes: JSON, which the first
// stores used, turns invalid UTF-8 in a name into U+FFFD, so a file named
// "caf\xe9" got a record naming another file. The encoding is
//
//	record = version field*
//	field  = tag:byte length:uvarint value[length]
//
// with version inodeV1. Fields appear in increasing tag order, at most once
// each, and only when their value is not the zero value; integers are
// big-endian at their full width; lengths are minimal uvarints. So each
// Inode has exactly one encoding, which the decoder checks. Records that
// begin with '{' are the JSON of earlier stores and are still read; every
// write uses the binary encoding, so they are rewritten as they change.
//
// A later version adds fields under new tags. A decoder refuses a tag it
// does not know rather than skipping it: it would drop the field the next
// time it rewrote the record.
const inodeV1 = 1

// Field tags of an inode record, in encoding order.
const (
	tagMode       = 1  // uint32: fs.FileMode
	tagSize       = 2  // int64
	tagMtime      = 3  // int64: ns since the epoch
	tagCtime      = 4  // int64
	tagUID        = 5  // uint32
	tagGID        = 6  // uint32
	tagParent     = 7  // uint64
	tagName       = 8  // bytes
	tagManifestID = 9  // bytes
	tagKind       = 10 // bytes
	tagNote       = 11 // bytes
	tagBlob       = 12 // bytes
	tagLayout     = 13 // bytes
	tagXattrs     = 14 // (nameLen:uvarint name valueLen:uvarint value)+, names ascending
	tagIdentity   = 15 // uint64, when not the inode's own number
	tagAtime      = 16 // int64: ns since the epoch
	tagLastUse    = 17 // int64: ns since the epoch
	tagUses       = 18 // uint64
	tagUseAge     = 19 // float64 bits
)

// Bounds of an inode record's variable fields. Values follow Linux
// (XATTR_SIZE_MAX); the other fields are short texts kvfs computes, bounded
// so that a damaged record cannot claim more. Names are bounded at three
// times Linux's NAME_MAX and XATTR_NAME_MAX: the store refuses names over
// 255 bytes where they come in (ENAMETOOLONG), but the JSON records of
// stores made before the binary encoding turned each invalid byte into the
// three bytes of U+FFFD, and those records must stay writable (a directory
// whose record cannot be written again can no longer be changed).
const (
	maxName       = 3 * 255
	maxXattrName  = 3 * 255
	maxXattrValue = 64 << 10
	maxText       = 64 << 10
	maxInodeBytes = 64 << 20 // a whole record
)

// marshalInode encodes an inode's attributes (not Ino, which is the
// record's key) canonically.
func marshalInode(n *Inode) ([]byte, error) {
	if err := checkInode(n); err != nil {
		return nil, fmt.Errorf("encode inode %d: %w: %w", n.Ino, ErrBadInode, err)
	}
	b := make([]byte, 0, 64+len(n.Name)+len(n.ManifestID)+len(n.Kind)+len(n.Note)+len(n.Blob)+len(n.Layout))
	b = append(b, inodeV1)
	fixed := func(tag byte, v uint64, width int) {
		if v == 0 {
			return
		}
		b = append(b, tag, byte(width))
		if width == 4 {
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		} else {
			b = binary.BigEndian.AppendUint64(b, v)
		}
	}
	text := func(tag byte, s string) {
		if s == "" {
			return
		}
		b = append(b, tag)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	fixed(tagMode, uint64(n.Mode), 4)
	fixed(tagSize, uint64(n.Size), 8)
	fixed(tagMtime, uint64(n.Mtime), 8)
	fixed(tagCtime, uint64(n.Ctime), 8)
	fixed(tagUID, uint64(n.UID), 4)
	fixed(tagGID, uint64(n.GID), 4)
	fixed(tagParent, n.Parent, 8)
	text(tagName, n.Name)
	text(tagManifestID, n.ManifestID)
	text(tagKind, n.Kind)
	text(tagNote, n.Note)
	text(tagBlob, n.Blob)
	text(tagLayout, n.Layout)
	if len(n.Xattrs) > 0 {
		names := make([]string, 0, len(n.Xattrs))
		var x []byte
		for k := range n.Xattrs {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			x = binary.AppendUvarint(x, uint64(len(k)))
			x = append(x, k...)
			x = binary.AppendUvarint(x, uint64(len(n.Xattrs[k])))
			x = append(x, n.Xattrs[k]...)
		}
		b = append(b, tagXattrs)
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	}
	if n.Identity != n.Ino {
		fixed(tagIdentity, n.Identity, 8)
	}
	fixed(tagAtime, uint64(n.Atime), 8)
	fixed(tagLastUse, uint64(n.LastUse), 8)
	fixed(tagUses, n.Uses, 8)
	fixed(tagUseAge, n.UseAge, 8)
	if len(b) > maxInodeBytes {
		return nil, fmt.Errorf("encode inode %d: %w: %d bytes", n.Ino, ErrBadInode, len(b))
	}
	return b, nil
}

// checkInode enforces the bounds that the decoder checks, so that every
// record written can be read back.
func checkInode(n *Inode) error {
	if n.Size < 0 {
		return fmt.Errorf("size %d", n.Size)
	}
	if err := checkName("name", n.Name, maxName, "/\x00"); err != nil {
		return err
	}
	for _, s := range []string{n.ManifestID, n.Kind, n.Note, n.Blob, n.Layout} {
		if len(s) > maxText {
			return fmt.Errorf("text field of %d bytes", len(s))
		}
	}
	for k, v := range n.Xattrs {
		if k == "" {
			return errors.New("empty xattr name")
		}
		if err := checkName("xattr name", k, maxXattrName, "\x00"); err != nil {
			return err
		}
		if len(v) > maxXattrValue {
			return fmt.Errorf("xattr %q: value of %d bytes", k, len(v))
		}
	}
	return nil
}

// checkName bounds a name's length and keeps out the bytes it cannot hold
// (NUL, and '/' in a file name). Any other byte is allowed: names are
// bytes, not UTF-8.
func checkName(what, s string, max int, forbidden string) error {
	if len(s) > max {
		return fmt.Errorf("%s of %d bytes (at most %d)", what, len(s), max)
	}
	if strings.ContainsAny(s, forbidden) {
		return fmt.Errorf("%s %q holds one of %q", what, s, forbidden)
	}
	return nil
}

// unmarshalInode decodes the record of inode ino: the binary encoding, or
// the JSON of stores made before it. Errors name the inode and satisfy
// ErrBadInode.
func unmarshalInode(ino uint64, b []byte) (*Inode, error) {
	n := &Inode{}
	var err error
	switch {
	case len(b) == 0:
		err = errors.New("empty record")
	case b[0] == '{':
		if err = json.Unmarshal(b, n); err != nil {
			err = fmt.Errorf("legacy JSON: %w", err)
		}
	case b[0] == inodeV1:
		err = n.decodeV1(b[1:])
	default:
		err = fmt.Errorf("unknown encoding version %d", b[0])
	}
	if err == nil && n.Identity == ino {
		err = errors.New("identity field holds the inode's own number") // never encoded
	}
	if err != nil {
		return nil, fmt.Errorf("inode %d: %w: %w", ino, ErrBadInode, err)
	}
	n.Ino = ino
	return n, nil
}

// uvarint reads a minimal uvarint from the front of b.
func uvarint(b []byte) (uint64, []byte, error) {
	v, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, errors.New("truncated or overlong length")
	}
	if k != len(binary.AppendUvarint(nil, v)) {
		return 0, nil, errors.New("length not minimally encoded")
	}
	return v, b[k:], nil
}

// chunk reads a length-prefixed byte string of at most max bytes from the
// front of b. The length is checked against what is left before anything
// is allocated.
func chunk(b []byte, max int) ([]byte, []byte, error) {
	n, b, err := uvarint(b)
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("length %d past the end (%d bytes left)", n, len(b))
	}
	if n > uint64(max) {
		return nil, nil, fmt.Errorf("length %d over the limit %d", n, max)
	}
	return b[:n], b[n:], nil
}

func (n *Inode) decodeV1(b []byte) error {
	if len(b) > maxInodeBytes {
		return fmt.Errorf("record of %d bytes", len(b)+1)
	}
	last := 0
	for len(b) > 0 {
		tag := int(b[0])
		if tag <= last {
			return fmt.Errorf("field %d after field %d", tag, last)
		}
		last = tag
		var v []byte
		var err error
		max := maxText
		switch tag {
		case tagName:
			max = maxName
		case tagXattrs:
			max = maxInodeBytes
		}
		if v, b, err = chunk(b[1:], max); err != nil {
			return fmt.Errorf("field %d: %w", tag, err)
		}
		if len(v) == 0 {
			return fmt.Errorf("field %d is empty", tag)
		}
		if err := n.setField(tag, v); err != nil {
			return fmt.Errorf("field %d: %w", tag, err)
		}
	}
	return nil
}

// setField decodes one field's non-empty value.
func (n *Inode) setField(tag int, v []byte) error {
	fixed := func(width int) (uint64, error) {
		if len(v) != width {
			return 0, fmt.Errorf("%d bytes, want %d", len(v), width)
		}
		var x uint64
		if width == 4 {
			x = uint64(binary.BigEndian.Uint32(v))
		} else {
			x = binary.BigEndian.Uint64(v)
		}
		if x == 0 {
			return 0, errors.New("zero value is not encoded")
		}
		return x, nil
	}
	var x uint64
	var err error
	switch tag {
	case tagMode, tagUID, tagGID:
		x, err = fixed(4)
	case tagSize, tagMtime, tagCtime, tagParent, tagIdentity, tagAtime, tagLastUse, tagUses, tagUseAge:
		x, err = fixed(8)
	}
	if err != nil {
		return err
	}
	switch tag {
	case tagMode:
		n.Mode = fs.FileMode(x)
	case tagSize:
		if int64(x) < 0 {
			return fmt.Errorf("size %d", int64(x))
		}
		n.Size = int64(x)
	case tagMtime:
		n.Mtime = int64(x)
	case tagCtime:
		n.Ctime = int64(x)
	case tagUID:
		n.UID = uint32(x)
	case tagGID:
		n.GID = uint32(x)
	case tagParent:
		n.Parent = x
	case tagName:
		if err := checkName("name", string(v), maxName, "/\x00"); err != nil {
			return err
		}
		n.Name = string(v)
	case tagManifestID:
		n.ManifestID = string(v)
	case tagKind:
		n.Kind = string(v)
	case tagNote:
		n.Note = string(v)
	case tagBlob:
		n.Blob = string(v)
	case tagLayout:
		n.Layout = string(v)
	case tagXattrs:
		return n.decodeXattrs(v)
	case tagIdentity:
		n.Identity = x
	case tagAtime:
		n.Atime = int64(x)
	case tagLastUse:
		n.LastUse = int64(x)
	case tagUses:
		n.Uses = x
	case tagUseAge:
		n.UseAge = x
	default:
		return errors.New("unknown field")
	}
	return nil
}

func (n *Inode) decodeXattrs(b []byte) error {
	n.Xattrs = map[string][]byte{}
	var prev []byte
	for len(b) > 0 {
		k, rest, err := chunk(b, maxXattrName)
		if err != nil {
			return fmt.Errorf("xattr name: %w", err)
		}
		if len(k) == 0 {
			return errors.New("empty xattr name")
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return fmt.Errorf("xattr %q after %q", k, prev)
		}
		if err := checkName("xattr name", string(k), maxXattrName, "\x00"); err != nil {
			return err
		}
		v, rest, err := chunk(rest, maxXattrValue)
		if err != nil {
			return fmt.Errorf("xattr %q value: %w", k, err)
		}
		n.Xattrs[string(k)] = append([]byte{}, v...)
		prev, b = k, rest
	}
	return nil
}
