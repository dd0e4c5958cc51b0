package store

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/kvfs/kvfs/manifest"
)

// Usage is how much of the store one file occupies.
type Usage struct {
	Stored int64 // bytes of the distinct chunks the file lists
	Shared int64 // of which chunks other files list too
}

// Usage computes a file's stored and shared bytes.
func (s *Store) Usage(ino uint64) (*Usage, error) {
	u := &Usage{}
	err := s.db.View(func(tx *manifest.Tx) error {
		m, err := tx.Manifest(ino)
		if errors.Is(err, manifest.ErrNotFound) {
			return fs.ErrNotExist
		}
		if err != nil {
			return err
		}
		for _, id := range m.Chunks() {
			c, err := tx.Chunk(id)
			if err != nil {
				return err
			}
			u.Stored += c.Loc.Len
			if c.Refs > 1 {
				u.Shared += c.Loc.Len
			}
		}
		return nil
	})
	if err != nil {
		return nil, inoErr("usage", ino, "", err)
	}
	return u, nil
}

// OpenIno opens a committed file by inode number; see Open.
func (s *Store) OpenIno(ino uint64) (*File, error) {
	f, err := s.openIno(ino)
	if err != nil {
		return nil, fmt.Errorf("open inode %d: %w", ino, err)
	}
	return f, nil
}

// Hold pins an inode as an open file does, without reading its manifest:
// the filesystem holds the inode of a file it is writing, so that the file
// stays (as an orphan) if its name goes while it is open. Release with
// Unhold.
func (s *Store) Hold(ino uint64) error {
	return s.viewPinning(func(tx *manifest.Tx) error {
		if _, err := tx.Inode(ino); err != nil {
			return inoErr("hold", ino, "", fs.ErrNotExist)
		}
		s.pin(ino)
		return nil
	})
}

// HoldReadable is Hold for a caller of user uid and group gid, if that
// caller may read the file whatever its supplementary groups (which the
// check leaves out, so as not to read them for every lookup): it pins
// nothing for one who may not, and reports held false then. The
// filesystem leases the version a lookup found to the looking thread
// (fs/lease.go); one who may not read the file must not hold it against
// the evictor by looking it up in a loop.
func (s *Store) HoldReadable(ino uint64, uid, gid uint32) (held bool, err error) {
	err = s.viewPinning(func(tx *manifest.Tx) error {
		n, err := tx.Inode(ino)
		if errors.Is(err, manifest.ErrNotFound) {
			return inoErr("hold", ino, "", fs.ErrNotExist)
		}
		if err != nil {
			return inoErr("hold", ino, "", err)
		}
		c := &Cred{UID: uid, GID: gid}
		// Without the supplementary groups, one in the file's group
		// would get others' bits; require the group's too.
		if !c.mayInode(n, mayRead) || uid != 0 && uid != n.UID && gid != n.GID && n.Mode.Perm()&0o040 == 0 {
			return nil
		}
		s.pin(ino)
		held = true
		return nil
	})
	return held, err
}

// Unhold drops a pin taken by Hold; see File.Close.
func (s *Store) Unhold(ino uint64) error { return s.unpin(ino) }
