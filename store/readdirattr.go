package store

import (
	"errors"

	"github.com/kvfs/kvfs/manifest"
)

// ReadDirAttr lists directory ino in name order, each entry described as
// LookupAttr describes it, all in one read transaction. A listing with
// attributes (the kernel's READDIRPLUS) would otherwise cost a transaction
// per entry, which is most of the time of a listing of a blocks directory
// of a few hundred entries.
func (s *Store) ReadDirAttr(ino uint64) ([]*FileInfo, error) {
	var out []*FileInfo
	err := s.db.View(func(tx *manifest.Tx) error {
		if _, err := dirInode(tx, ino); err != nil {
			return err
		}
		ents, err := tx.ReadDir(ino)
		if err != nil {
			return err
		}
		out = make([]*FileInfo, 0, len(ents))
		for _, e := range ents {
			n, err := tx.Inode(e.Ino)
			if err != nil {
				return err
			}
			fi := inoAttr(n)
			fi.Name = e.Name // the entry's name, which a link's inode may not carry
			out = append(out, fi)
		}
		return nil
	})
	if err != nil {
		return nil, inoErr("readdir", ino, "", err)
	}
	return out, nil
}

// LookupAttrs describes the entries names of directory parent as
// LookupAttr describes each, in one read transaction: a listing's batch
// of entries, read again when the store changed since the listing. A name
// that is not there (any more) has a nil entry; other errors fail the
// whole call.
func (s *Store) LookupAttrs(parent uint64, names []string) ([]*FileInfo, error) {
	out := make([]*FileInfo, len(names))
	err := s.db.View(func(tx *manifest.Tx) error {
		for i, name := range names {
			n, err := lookupFn(parent, name)(tx)
			if errors.Is(err, manifest.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			fi := inoAttr(n)
			fi.Name = name
			out[i] = fi
		}
		return nil
	})
	if err != nil {
		return nil, inoErr("lookup", parent, "", err)
	}
	return out, nil
}
