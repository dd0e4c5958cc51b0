package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kvfs/kvfs/manifest"
)

// A store has an owner, recorded at init: the user whose mount it is. The
// root directory and what is created without a calling user — put, the
// control socket's PUT, the parents that a put creates — belong to the
// owner, so that a user's own mount is theirs to write into (a FUSE
// mount by an ordinary user serves requests as that user, and the kernel
// checks modes against the owners kvfs reports). Entries created through
// the mount belong to their caller.

// ProcessOwner is the effective user and group of this process: the owner
// of a store that it initialises.
func ProcessOwner() Owner { return Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())} }

// recordOwner records o as the store's owner and gives it the root
// directory if the root still has the 0:0 that stores created before
// owners were recorded gave it (a root directory chowned through a mount
// keeps its owner).
func recordOwner(tx *manifest.Tx, o Owner) error {
	if err := tx.SetOwner(o.UID, o.GID); err != nil {
		return err
	}
	root, err := tx.Inode(manifest.RootIno)
	if err != nil {
		return err
	}
	if root.UID != 0 || root.GID != 0 {
		return nil
	}
	root.UID, root.GID = o.UID, o.GID
	return tx.PutInode(root)
}

// chownTree gives dir and everything in it to o.
func chownTree(dir string, o Owner) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(o.UID), int(o.GID))
	})
}

// loadOwner sets s.owner: the recorded owner or, for a store created
// before owners were recorded, the owner of the store directory (its
// creator), which is then recorded. A store whose index cannot be written
// now (a full disk) still opens, with the owner known in memory only.
func (s *Store) loadOwner() error {
	recorded := false
	s.db.View(func(tx *manifest.Tx) error {
		uid, gid, ok := tx.Owner()
		s.owner, recorded = Owner{UID: uid, GID: gid}, ok
		return nil
	})
	if recorded {
		return nil
	}
	o, err := dirOwner(s.dir)
	if err != nil {
		return fmt.Errorf("store owner: %w", err)
	}
	s.owner = o
	err = s.db.Update(func(tx *manifest.Tx) error {
		if _, _, ok := tx.Owner(); ok {
			return nil
		}
		return recordOwner(tx, o)
	})
	if err != nil {
		s.log.Warn("cannot record the store's owner (taken from the store directory)", "dir", s.dir, "uid", o.UID, "gid", o.GID, "err", err)
	} else {
		s.log.Info("recorded the store's owner (taken from the store directory)", "dir", s.dir, "uid", o.UID, "gid", o.GID)
	}
	return nil
}

// dirOwner is the owner of a directory.
func dirOwner(dir string) (Owner, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return Owner{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Owner{}, &fs.PathError{Op: "stat", Path: dir, Err: errors.ErrUnsupported}
	}
	return Owner{UID: st.Uid, GID: st.Gid}, nil
}

// Owner is the store's owner: the owner of its root directory when it was
// created, and of what is created without a calling user.
func (s *Store) Owner() Owner { return s.owner }
