package store

import (
	"errors"
	"io/fs"
	"sync"
	"syscall"

	"github.com/kvfs/kvfs/blockstore"
)

// Punching released chunks out of their packs reclaims space; no reader
// waits for it, and it is slow: every punched range is a journaled
// fallocate of the pack (on ext4 mounted with discard, a discard too),
// 0.2–3 ms each on the development machine, and a commit that replaces
// 35 MiB of a 256 MiB file frees some 500 chunks in about 100 ranges:
// 60–350 ms of its fsync (issue 9, "4 fsync writers"). So the ranges are
// punched by a goroutine of the store's, after the releases that freed
// them are durable (syncReleases, in the caller), while the commit
// returns. Queued ranges of the same pack are merged into fewer punches.
//
// Crash safety does not change: a crash drops the queue as it dropped a
// punch that had not happened yet, and reconcile punches every dead range
// of a partly live pack at the next open. A queued range never becomes
// live again: packs only grow past their committed length, pack numbers
// are never reused, and a pack that became dead and was removed meanwhile
// is skipped (its punch fails with ErrNotExist).
type punchQueue struct {
	mu   sync.Mutex
	idle sync.Cond // signalled when the worker stops
	// byPack are the ranges queued and not taken by the worker yet.
	byPack map[uint32][]blockstore.Loc
	busy   bool // a worker runs
}

// Punches are queued only while the store's filesystem has room
// (roomy): on a nearly full disk a removal is how a user makes room, and
// the next write must find it free.
const (
	roomyBytes = 1 << 30 // free bytes, at least
	roomyShare = 16      // and at least 1/roomyShare of the filesystem
)

// roomy reports whether the store's filesystem has room enough that
// punches may wait.
func (s *Store) roomy() bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.dir, &st); err != nil {
		return false
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	return free >= roomyBytes && free >= int64(st.Blocks)*int64(st.Bsize)/roomyShare
}

// queuePunch queues the ranges of byPack for punching, starting a worker
// if none runs.
func (s *Store) queuePunch(byPack map[uint32][]blockstore.Loc) {
	q := &s.punchq
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byPack == nil {
		q.byPack = map[uint32][]blockstore.Loc{}
	}
	for pack, locs := range byPack {
		q.byPack[pack] = append(q.byPack[pack], locs...)
	}
	if !q.busy {
		q.busy = true
		go s.punchWorker()
	}
}

// punchWorker punches queued ranges until the queue is empty.
func (s *Store) punchWorker() {
	q := &s.punchq
	for {
		q.mu.Lock()
		batch := q.byPack
		q.byPack = nil
		if len(batch) == 0 {
			q.busy = false
			if q.idle.L == nil {
				q.idle.L = &q.mu
			}
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		for pack, locs := range batch {
			s.punchPack(pack, locs)
		}
		s.reserve.fill()
	}
}

// punchPack punches locs out of pack, using the reserve on a full disk.
func (s *Store) punchPack(pack uint32, locs []blockstore.Loc) {
	err := s.packs.Punch(pack, locs)
	if errors.Is(err, syscall.ENOSPC) && s.reserve.release("punch", err) {
		err = s.packs.Punch(pack, locs)
	}
	// A pack gone meanwhile was emptied by a concurrent release.
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("punch released chunks", "err", err)
	}
}

// WaitReclaim waits until the released chunks queued for punching so far
// are punched out of their packs: their disk space is free. Close waits
// too; so do tests that measure the space.
func (s *Store) WaitReclaim() {
	q := &s.punchq
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.idle.L == nil {
		q.idle.L = &q.mu
	}
	for q.busy {
		q.idle.Wait()
	}
}
