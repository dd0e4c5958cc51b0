package store

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/kvfs/kvfs/manifest"
)

// ErrDamaged is the error of a read of a damaged range: bytes that were
// lost (kvfs fsck --repair marked them) rather than zeros that were
// written. It is EIO to callers that map errors to errnos.
var ErrDamaged = fmt.Errorf("damaged range (lost bytes, marked by kvfs fsck --repair): %w", syscall.EIO)

// Damage returns the damaged byte ranges of a file, or ErrNoAttr when it
// has none (the xattr user.kvfs.damaged shows them).
func (s *Store) Damage(ino uint64) ([]Range, error) {
	var rs []Range
	err := s.db.View(func(tx *manifest.Tx) error {
		m, err := tx.Manifest(ino)
		if errors.Is(err, manifest.ErrNotFound) {
			return ErrNoAttr // a directory
		}
		if err != nil {
			return err
		}
		var off int64
		for _, e := range m {
			if e.Damaged {
				rs = append(rs, Range{off, e.Len})
			}
			off += e.Len
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("damage of inode %d: %w", ino, err)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("damage of inode %d: %w", ino, ErrNoAttr)
	}
	return rs, nil
}
