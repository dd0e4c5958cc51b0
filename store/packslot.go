package store

import (
	"fmt"
	"os"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// packSlot is a pack open for appending by one ingest at a time, with the
// length that the index last committed for it.
type packSlot struct {
	app       *blockstore.Appender
	committed int64
}

// appender returns the pack for the next n new bytes, moving to a new pack
// when the current one is full.
func (in *ingest) appender(n int64) (*blockstore.Appender, error) {
	if k := len(in.slots); k == 0 || in.slots[k-1].app.Size() > 0 && in.slots[k-1].app.Size()+n > in.s.packBytes {
		slot, err := in.s.takePack(k > 0)
		if err != nil {
			return nil, err
		}
		in.slots = append(in.slots, slot)
	}
	return in.slots[len(in.slots)-1].app, nil
}

// takePack returns an idle pack with room: one in the pool, or one of the
// index's packs that no appender holds (after a restart); otherwise a new
// pack. fresh forces a new pack (the current one is full).
//
// Lock order: a bbolt write transaction, then s.mu (as in dropInode); so
// s.mu is never held while waiting for a transaction.
func (s *Store) takePack(fresh bool) (*packSlot, error) {
	if !fresh {
		s.mu.Lock()
		for i, p := range s.idle {
			if p.app.Size() < s.packBytes {
				s.idle = append(s.idle[:i], s.idle[i+1:]...)
				s.mu.Unlock()
				return p, nil
			}
		}
		s.mu.Unlock()
	}
	var pack uint32
	var committed int64
	err := s.db.Update(func(tx *manifest.Tx) error {
		pack, committed = 0, 0
		if !fresh {
			packs, err := tx.Packs()
			if err != nil {
				return err
			}
			s.mu.Lock()
			for n, p := range packs {
				if !s.held[n] && p.Committed < s.packBytes && (pack == 0 || n > pack) {
					pack, committed = n, p.Committed
				}
			}
			if pack != 0 {
				s.held[pack] = true
			}
			s.mu.Unlock()
			if pack != 0 {
				return nil
			}
		}
		var err error
		pack, err = s.allocPack(tx)
		return err
	})
	if err == nil {
		var app *blockstore.Appender
		if app, err = s.packs.NewAppender(pack, committed); err == nil {
			return &packSlot{app: app, committed: committed}, nil
		}
	}
	if pack != 0 {
		s.mu.Lock()
		delete(s.held, pack)
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("allocate pack: %w", err)
}

// sync makes every appended chunk durable.
func (in *ingest) sync() error {
	for _, p := range in.slots {
		if err := p.app.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// finish returns the ingest's packs to the idle pool: committed, or rolled
// back to their last committed length after a failure.
func (in *ingest) finish(err error) {
	s := in.s
	if in.committed {
		err = nil // only its sync failed: nothing to roll back
	}
	if a := in.adopted; a != nil {
		if err != nil {
			// Give the spool back to its writer, and forget the pack.
			if rerr := os.Rename(s.packs.Path(a.pack), a.spoolPath); rerr != nil {
				s.log.Error("return spool after a failed commit", "spool", a.spoolPath, "err", rerr)
			}
			s.db.Update(func(tx *manifest.Tx) error { return tx.DeletePack(a.pack) })
		}
		s.mu.Lock()
		delete(s.held, a.pack)
		s.mu.Unlock()
		if err == nil {
			// Dead already if a concurrent ingest stored all of its new
			// chunks first.
			s.dropDeadPacks([]uint32{a.pack})
		}
	}
	for _, p := range in.slots {
		if err != nil && p.app.Size() != p.committed {
			if rerr := p.app.Rollback(p.committed); rerr != nil {
				s.log.Warn("roll back pack", "err", rerr)
				s.release(p)
				continue
			}
		}
		if p.app.Size() >= s.packBytes {
			s.release(p)
			continue
		}
		s.mu.Lock()
		keep := len(s.idle) < maxIdlePacks
		if keep {
			s.idle = append(s.idle, p)
		}
		s.mu.Unlock()
		if !keep {
			s.release(p)
		}
	}
	in.slots = nil
}

// maxIdlePacks bounds the idle pool: each idle pack keeps a descriptor
// open, and the pool would otherwise grow to the largest number of
// ingests that ever ran at once. A pack released from the pool is found
// again by takePack through the index, by its committed length.
const maxIdlePacks = 4

// release closes a pack's appender and lets takePack hand it out again
// (by its committed length in the index), or removes it if nothing in it
// is live.
func (s *Store) release(p *packSlot) {
	p.app.Close()
	s.mu.Lock()
	delete(s.held, p.app.Pack())
	s.mu.Unlock()
	s.dropDeadPacks([]uint32{p.app.Pack()})
}
