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

// Unhold drops a pin taken by Hold; see File.Close.
func (s *Store) Unhold(ino uint64) error { return s.unpin(ino) }
