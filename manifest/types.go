package manifest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/zeebo/blake3"
)

// RootIno is the inode number of the root directory.
const RootIno uint64 = 1

// Inode is the attributes of a file or directory.
type Inode struct {
	Ino   uint64      `json:"-"`
	Mode  fs.FileMode `json:"mode"` // type bits and permissions
	Size  int64       `json:"size"`
	Mtime int64       `json:"mtime"` // ns since the epoch
	Ctime int64       `json:"ctime"` // ns since the epoch
	UID   uint32      `json:"uid"`
	GID   uint32      `json:"gid"`
	// Xattrs are the inline user extended attributes of a legacy record,
	// by full name ("user.x"). Attributes are kept in their own bucket
	// now (xattr.go); the store moves these there when it changes one.
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
	// ManifestID names the committed content (files only); see
	// Manifest.ID.
	ManifestID string `json:"manifestId,omitempty"`
	// Kind records how the content was chunked: "mlxkv", "blob" or
	// "plain"; Note says why a .mlxkv was stored as plain.
	Kind string `json:"kind,omitempty"`
	Note string `json:"note,omitempty"`
	// Blob is the sha256 of a blob's content, set for files under a
	// "blocks" directory whose name matched it.
	Blob string `json:"blob,omitempty"`
	// Layout is the snapshot-index key of a .mlxkv file, "" otherwise.
	Layout string `json:"layout,omitempty"`
	// Parent and Name are the inode's one name (kvfs has no hard links):
	// they let a directory check rename cycles and a file being written
	// find the name its new content replaces. Both are 0 and "" for the
	// root and for orphans.
	Parent uint64 `json:"parent,omitempty"`
	Name   string `json:"name,omitempty"`
	// Identity is the file's inode number as users see it (st_ino): the
	// number of its first version, kept by every commit of new content,
	// which gets a new inode of its own. 0 in records of stores made
	// before it, and then the inode's own number (see ID).
	Identity uint64 `json:"-"`
	// Atime is the access time (ns since the epoch), as utimensat set it:
	// reads do not change it (see docs/MOUNT.md). 0 in records of stores
	// made before it, and then the modification time stands in (see
	// AccessTime).
	Atime int64 `json:"atime,omitempty"`
	// LastUse, Uses and UseAge are the retention policy's memory of the
	// file (store/recency.go): when it was last opened for reading or had
	// its times set (ns since the epoch; 0: never since it was written),
	// how often, and the GreedyDual age at that last use (float64 bits).
	// The store counts uses in memory and writes them here in batches, so
	// that a read costs no index write and the order survives a restart.
	LastUse int64  `json:"-"`
	Uses    uint64 `json:"-"`
	UseAge  uint64 `json:"-"`
}

// ID is the file's identity: Identity, or the inode's own number.
func (n *Inode) ID() uint64 {
	if n.Identity != 0 {
		return n.Identity
	}
	return n.Ino
}

// AccessTime is the inode's access time: Atime, or Mtime when Atime is
// 0 (records of stores made before atimes were stored; an atime set to
// exactly the epoch reads as the modification time too, since zero
// values are not encoded).
func (n *Inode) AccessTime() int64 {
	if n.Atime != 0 {
		return n.Atime
	}
	return n.Mtime
}

// IsDir reports whether the inode is a directory.
func (n *Inode) IsDir() bool { return n.Mode.IsDir() }

// Extent is a run of a file's bytes: a whole chunk, or Len zero bytes when
// Zero is set.
type Extent struct {
	Zero bool
	// Damaged marks a run whose bytes were lost (fsck --repair replaced a
	// chunk that is gone by it): it is also Zero, so that code that only
	// knows chunks and zero runs never looks a chunk up for it, but reads
	// of it fail (EIO) instead of returning zeros.
	Damaged bool
	ID      blockstore.ID
	Len     int64
}

// Manifest is a file's content as ordered extents.
type Manifest []Extent

// Size is the total length of the extents.
func (m Manifest) Size() int64 {
	var n int64
	for _, e := range m {
		n += e.Len
	}
	return n
}

// Chunks returns the distinct chunk IDs the manifest lists, in first-use
// order.
func (m Manifest) Chunks() []blockstore.ID {
	seen := make(map[blockstore.ID]struct{}, len(m))
	var out []blockstore.ID
	for _, e := range m {
		if e.Zero {
			continue
		}
		if _, ok := seen[e.ID]; !ok {
			seen[e.ID] = struct{}{}
			out = append(out, e.ID)
		}
	}
	return out
}

const manifestVersion = 1

// maxFileSize bounds a file's size, so that sums of extent lengths never
// overflow an int64.
const maxFileSize = 1 << 62

// MarshalBinary is the canonical encoding: a version byte, then per extent
// a tag byte (0 chunk, 1 zeros, 2 damaged), the length as a uvarint and,
// for chunks, the 32-byte ID. Adjacent zero runs (and adjacent damaged
// runs) are merged first, so equal content has one encoding.
func (m Manifest) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+len(m)*(1+binary.MaxVarintLen64+32))
	b = append(b, manifestVersion)
	for i := 0; i < len(m); i++ {
		e := m[i]
		if e.Len <= 0 {
			return nil, fmt.Errorf("manifest extent %d has length %d", i, e.Len)
		}
		if e.Zero {
			for i+1 < len(m) && m[i+1].Zero && m[i+1].Damaged == e.Damaged {
				i++
				e.Len += m[i].Len
			}
			tag := byte(1)
			if e.Damaged {
				tag = 2
			}
			b = append(b, tag)
			b = binary.AppendUvarint(b, uint64(e.Len))
			continue
		}
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(e.Len))
		b = append(b, e.ID[:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a manifest into fresh memory.
func (m *Manifest) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != manifestVersion {
		return errors.New("manifest: unknown encoding version")
	}
	b = b[1:]
	var out Manifest
	var total uint64
	for len(b) > 0 {
		tag := b[0]
		n, k := binary.Uvarint(b[1:])
		if k <= 0 || n == 0 || n > maxFileSize-total {
			return errors.New("manifest: bad extent length")
		}
		total += n
		b = b[1+k:]
		e := Extent{Len: int64(n)}
		switch tag {
		case 1:
			e.Zero = true
		case 2:
			e.Zero, e.Damaged = true, true
		case 0:
			if len(b) < 32 {
				return errors.New("manifest: truncated chunk id")
			}
			copy(e.ID[:], b)
			b = b[32:]
		default:
			return fmt.Errorf("manifest: unknown extent tag %d", tag)
		}
		out = append(out, e)
	}
	*m = out
	return nil
}

// ID is the blake3-256 of the canonical encoding, in hex with its
// algorithm: it names one committed version of a file's content.
func (m Manifest) ID() string {
	b, _ := m.MarshalBinary()
	sum := blake3.Sum256(b)
	return fmt.Sprintf("blake3-%x", sum)
}

// Chunk is a chunk record of the index.
type Chunk struct {
	Loc  blockstore.Loc
	Refs uint32
}

func (c Chunk) marshal() []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint32(b[0:], c.Loc.Pack)
	binary.BigEndian.PutUint64(b[4:], uint64(c.Loc.Off))
	binary.BigEndian.PutUint64(b[12:], uint64(c.Loc.Len))
	binary.BigEndian.PutUint32(b[20:], c.Refs)
	return b
}

func unmarshalChunk(b []byte) (Chunk, error) {
	if len(b) != 24 {
		return Chunk{}, fmt.Errorf("chunk record of %d bytes", len(b))
	}
	return Chunk{
		Loc: blockstore.Loc{Pack: binary.BigEndian.Uint32(b[0:]), Off: int64(binary.BigEndian.Uint64(b[4:])),
			Len: int64(binary.BigEndian.Uint64(b[12:]))},
		Refs: binary.BigEndian.Uint32(b[20:]),
	}, nil
}

// Pack is a pack's state in the index.
type Pack struct {
	Committed int64 // bytes of the pack that committed manifests may use
	Dead      int64 // bytes of chunks released since
}

func (p Pack) marshal() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b[0:], uint64(p.Committed))
	binary.BigEndian.PutUint64(b[8:], uint64(p.Dead))
	return b
}

func unmarshalPack(b []byte) (Pack, error) {
	if len(b) != 16 {
		return Pack{}, fmt.Errorf("pack record of %d bytes", len(b))
	}
	return Pack{Committed: int64(binary.BigEndian.Uint64(b[0:])), Dead: int64(binary.BigEndian.Uint64(b[8:]))}, nil
}
