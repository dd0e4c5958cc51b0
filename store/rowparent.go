package store

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/kvfs/kvfs/manifest"
)

// RowParent returns the path of the stored file whose rows a file of a
// format cut by rows (a snapshot, a llama.cpp state file, a safetensors
// cache) shares, as the store finds a parent now: the other file of the
// same layout with the longest common token prefix, and that prefix's
// length in tokens. It returns manifest.ErrNotFound for a file of no
// such format, or with no such file beside it. For `kvfs inspect` and
// the user.kvfs.parent attribute: what a user asks is which file a
// snapshot shares its bytes with.
func (s *Store) RowParent(ino uint64) (path string, common int, err error) {
	err = s.db.View(func(tx *manifest.Tx) error {
		n, err := tx.Inode(ino)
		if err != nil {
			return err
		}
		if n.Layout == "" {
			return manifest.ErrNotFound
		}
		own, err := tx.SnapshotTokens(n.Layout, ino)
		if err != nil {
			return err
		}
		own = bytes.Clone(own)
		var best uint64
		err = tx.Snapshots(n.Layout, func(other uint64, tb []byte) error {
			if other == ino {
				return nil
			}
			k := min(len(tb), len(own)) / 4
			l := 0
			for l < k && binary.LittleEndian.Uint32(tb[4*l:]) == binary.LittleEndian.Uint32(own[4*l:]) {
				l++
			}
			if l > common {
				best, common = other, l
			}
			return nil
		})
		if err != nil {
			return err
		}
		if best == 0 {
			return manifest.ErrNotFound
		}
		p, err := tx.Inode(best)
		if err != nil {
			return err
		}
		path = strings.Join(inoComps(tx, p), "/")
		return nil
	})
	return path, common, err
}
