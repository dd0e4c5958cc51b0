package store

import "github.com/kvfs/kvfs/manifest"

// FileExtents returns the extents of the committed file ino, and the
// file (closed by the caller), for tests.
func FileExtents(s *Store, ino uint64) (*File, manifest.Manifest, error) {
	f, err := s.openIno(ino)
	if err != nil {
		return nil, nil, err
	}
	return f, f.m, nil
}
