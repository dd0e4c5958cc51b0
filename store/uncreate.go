package store

import (
	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Uncreate undoes CreateAt when the file could not be opened after all (no
// spool, no descriptor): a create that fails must leave no name behind. It
// removes name from parent only if the name still points at ino, so that
// a file that replaced it meanwhile (a rename over it) is not touched;
// otherwise it does nothing and returns nil.
func (s *Store) Uncreate(parent uint64, name string, ino uint64) error {
	var freed []blockstore.Loc
	err := s.db.Update(func(tx *manifest.Tx) error {
		cur, err := tx.Lookup(parent, name)
		if err != nil || cur != ino {
			return nil
		}
		freed, err = s.removeTx(tx, parent, name, removeFile)
		return err
	})
	if err != nil {
		return inoErr("undo create", parent, name, err)
	}
	s.punch(freed)
	return nil
}
