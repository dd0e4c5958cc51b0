package store

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
)

// MatchCandidate is a snapshot indexed under a chain key: one that shares
// the key's 256k tokens with every prompt that has the key.
type MatchCandidate struct {
	Ino  uint64
	Path string // from the mount's root, as stored (bytes, not text)
}

// prefixGroups reports whether key is a prefix key h(k), k ≥ 1, for the
// snapshots indexed under it: not a model key, nor h0, which name no
// tokens (their candidates would be every snapshot of a model).
func prefixGroups(groups uint32) bool { return groups != 0 && groups != manifest.ModelGroups }

// MatchCandidates lists the snapshots c may read that are indexed under
// the prefix key h(k), k ≥ 1, earliest committed first: every one that
// shares those tokens, usable or not (docs/PREFIX.md,
// /.kvfs/candidates/<hex>). A client that reads each one's header and
// judges it by Rejection and Better against its whole prompt, from its
// longest key down, gets Match's answer: a single link per key
// (/.kvfs/match) cannot, since which snapshot is best depends on the
// tokens past the key. A key with none c may read, a model key and h0 are
// fs.ErrNotExist.
func (s *Store) MatchCandidates(key mlx.ChainKey, c *Cred) ([]MatchCandidate, error) {
	var out []MatchCandidate
	err := s.db.View(func(tx *manifest.Tx) error {
		tx.PrefixInodes(key, func(ino uint64, groups uint32) bool {
			if !prefixGroups(groups) {
				return false
			}
			if cd := visible(tx, ino, c); cd != nil {
				out = append(out, MatchCandidate{Ino: ino, Path: inoPath(tx, cd.n)})
			}
			return true
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("match candidates %x: %w", key, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("match candidates %x: %w", key, fs.ErrNotExist)
	}
	return out, nil
}

// HasCandidates reports whether key has MatchCandidates for c, without
// listing them: whether /.kvfs/candidates/<hex> exists for c.
func (s *Store) HasCandidates(key mlx.ChainKey, c *Cred) bool {
	found := false
	s.db.View(func(tx *manifest.Tx) error {
		tx.PrefixInodes(key, func(ino uint64, groups uint32) bool {
			if !prefixGroups(groups) {
				return false
			}
			found = visible(tx, ino, c) != nil
			return !found
		})
		return nil
	})
	return found
}

// MatchCandidateAt returns the path of snapshot ino if it is one of key's
// MatchCandidates for c, and fs.ErrNotExist if not.
func (s *Store) MatchCandidateAt(key mlx.ChainKey, ino uint64, c *Cred) (string, error) {
	var p string
	err := s.db.View(func(tx *manifest.Tx) error {
		groups, ok := tx.PrefixGroups(key, ino)
		if !ok || !prefixGroups(groups) {
			return manifest.ErrNotFound
		}
		cd := visible(tx, ino, c)
		if cd == nil {
			return manifest.ErrNotFound
		}
		p = inoPath(tx, cd.n)
		return nil
	})
	if errors.Is(err, manifest.ErrNotFound) {
		return "", fmt.Errorf("match candidate %x/%d: %w", key, ino, fs.ErrNotExist)
	} else if err != nil {
		return "", fmt.Errorf("match candidate %x/%d: %w", key, ino, err)
	}
	return p, nil
}

// SnapshotPath returns the path of snapshot ino if c may read it, and
// fs.ErrNotExist if not: where a /.kvfs/candidates link leads.
func (s *Store) SnapshotPath(ino uint64, c *Cred) (string, error) {
	var p string
	err := s.db.View(func(tx *manifest.Tx) error {
		cd := visible(tx, ino, c)
		if cd == nil {
			return manifest.ErrNotFound
		}
		p = inoPath(tx, cd.n)
		return nil
	})
	if errors.Is(err, manifest.ErrNotFound) {
		return "", fmt.Errorf("snapshot %d: %w", ino, fs.ErrNotExist)
	} else if err != nil {
		return "", fmt.Errorf("snapshot %d: %w", ino, err)
	}
	return p, nil
}
