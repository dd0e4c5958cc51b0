package store

import (
	"fmt"

	"github.com/kvfs/kvfs/manifest"
)

// A pack whose every byte is dead (released, punched, or never live, as the
// holes of an adopted spool) is removed: its record in one transaction,
// then its file, and with it the read descriptor that the pack directory
// keeps for it. Without this a pack lived for good, so every version of a
// file ever read kept a descriptor open after the file itself was gone: a
// loop rewriting one 70 KB file (each version mostly new, so its own pack)
// ran the daemon out of descriptors after about 19,000 rewrites (issue 7).
//
// Removal trusts the pack's dead count, which Check verifies against the
// chunk index (live + dead = committed). A pack that ingests are appending
// to, or that an ingest is adopting, is skipped: it may still receive
// chunks; it is looked at again when they finish. A pack open for
// appending that no ingest uses is closed and removed (packslot.go).
//
// Order for crashes: the record goes first, then the file. A pack file
// without a record is therefore dead, and recover removes it.

// dropDeadPacks removes those of packs that hold nothing live and no
// appender holds, and returns the ones it removed. Errors are logged: a
// dead pack left behind costs disk inodes, not data.
func (s *Store) dropDeadPacks(packs []uint32) map[uint32]bool {
	if len(packs) == 0 {
		return nil
	}
	// A read transaction first: most releases leave their packs partly
	// live, and a write transaction costs a sync.
	var any bool
	s.db.View(func(tx *manifest.Tx) error {
		for _, pack := range packs {
			if p, err := tx.Pack(pack); err == nil && isDead(p) {
				any = true
				return nil
			}
		}
		return nil
	})
	if !any {
		return nil
	}
	gone := map[uint32]bool{}
	seq, err := s.db.UpdateSeq(func(tx *manifest.Tx) error {
		clear(gone)
		for _, pack := range packs {
			p, err := tx.Pack(pack)
			if err != nil {
				return err
			}
			if !isDead(p) || gone[pack] {
				continue
			}
			// s.mu after the transaction, as in takePack, which marks a
			// pack held inside its own write transaction: the two are
			// serialised, so a pack is never both taken and removed.
			s.mu.Lock()
			held := s.held[pack]
			if sp := s.appending.byPack[pack]; held && sp != nil && sp.users == 0 {
				// Open for appending but idle: it takes no more chunks.
				s.closeAppendLocked(sp)
				held = false
			}
			s.mu.Unlock()
			if held {
				continue
			}
			if err := tx.DeletePack(pack); err != nil {
				return err
			}
			gone[pack] = true
		}
		return nil
	})
	if err != nil {
		s.log.Warn("remove dead packs", "err", fmt.Errorf("forget dead packs: %w", err))
		return nil
	}
	// The file goes only once the record forgetting it is durable: a
	// crash that lost the record would bring back a pack without a file.
	if err := s.db.Sync(seq); err != nil {
		s.log.Warn("remove dead packs", "err", fmt.Errorf("forget dead packs: %w", err))
		return nil
	}
	for pack := range gone {
		if err := s.packs.Remove(pack); err != nil {
			s.log.Warn("remove dead packs", "pack", s.packs.Path(pack), "err", err)
		}
	}
	return gone
}

// isDead reports a committed pack with nothing live in it.
func isDead(p manifest.Pack) bool { return p.Committed > 0 && p.Dead >= p.Committed }
