package store

import (
	"errors"
	"fmt"

	"github.com/kvfs/kvfs/manifest"
)

// User pins ("kept" files): a file with the attribute PinXattr is never
// evicted (evict.go). `kvfs pin` and setxattr through the mount set it,
// `kvfs unpin` and removexattr clear it. It is an ordinary attribute of
// the file in the index, so it persists, shows in listxattr, and a commit
// of new content keeps it.

// SetKept pins (keep) or unpins inode ino, a file. Unpinning a file that
// is not pinned is not an error.
func (s *Store) SetKept(ino uint64, keep bool) error {
	var err error
	if keep {
		err = s.SetXattr(ino, PinXattr, []byte("1"), 0)
	} else if err = s.SetXattr(ino, PinXattr, nil, 0); errors.Is(err, ErrNoAttr) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pin inode %d: %w", ino, err)
	}
	return nil
}

// Kept reports whether inode ino is pinned.
func (s *Store) Kept(ino uint64) bool {
	_, err := s.Xattr(ino, PinXattr)
	return err == nil
}

// KeepPath pins or unpins the file at path.
func (s *Store) KeepPath(path string, keep bool) error {
	var ino uint64
	err := s.db.View(func(tx *manifest.Tx) error {
		comps, err := splitPath(path)
		if err != nil {
			return err
		}
		n, err := walkInode(tx, comps)
		if err != nil {
			return err
		}
		if n.IsDir() {
			return manifest.ErrIsDir
		}
		ino = n.Ino
		return nil
	})
	if err == nil {
		err = s.SetKept(ino, keep)
	}
	if err != nil {
		op := "pin"
		if !keep {
			op = "unpin"
		}
		return pathErr(op, path, err)
	}
	return nil
}
