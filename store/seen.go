package store

import (
	"encoding/hex"
	"sync"
	"time"
)

// Seen means kept (docs/DESIGN.md, "Invariants"). The engine's blocks protocol
// (FORMAT.md §4.3) checks whether blocks/<h> exists, skips the block when
// it does, and commits the snapshot's manifest last. Between the check and
// the manifest's rename nothing in the index protects that block: no
// committed manifest lists it yet, and it may be older than the blob grace
// period, which counts from the blob's creation or from the loss of its
// last name. Eviction, the release of its last manifest or the expiry of
// its grace would then remove a block that an acknowledged snapshot is
// about to list.
//
// So the store remembers when each blob was last seen to exist by a client
// (a lookup, a getattr, an open: the file system reports them with
// SawBlob), and keeps the blob, its name and its content, until the grace
// period has passed since that sighting, plus however long the client may
// go on seeing it from its own cache (the kernel's entry and attribute
// timeouts, which the file system keeps short for blobs so that a check
// reaches the daemon). A committed manifest that lists the blob pins it
// from then on (blobs.go).
//
// Sightings live in memory. A daemon that dies ends every write in flight
// through it, but an engine may have checked a block through the previous
// mount and write its manifest through the next one: every blob counts as
// seen when the store is opened.

// sightings records when blobs were last seen, by their sha256.
type sightings struct {
	mu sync.Mutex
	// until is, for each blob seen, the time (ns) until which it is kept.
	until map[[32]byte]int64
	// floor keeps every blob until then: the store's opening plus the
	// grace period.
	floor int64
	// added counts insertions since the last sweep of expired entries.
	added int
}

// sweepEvery is how many new sightings trigger a sweep of expired ones,
// which bounds the table by the blobs seen within one grace period.
const sweepEvery = 4096

// SawBlob records that a client saw the blob named hash (its lowercase hex
// sha256) exist, and may go on seeing it from its own cache for cached
// more: the blob is kept for the grace period after that.
func (s *Store) SawBlob(hash string, cached time.Duration) {
	var key [32]byte
	if len(hash) != 2*len(key) {
		return
	}
	if _, err := hex.Decode(key[:], []byte(hash)); err != nil {
		return
	}
	now := time.Now().UnixNano()
	until := now + int64(cached) + int64(s.blobGrace)
	t := &s.seen
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.until == nil {
		t.until = map[[32]byte]int64{}
	}
	if until > t.until[key] {
		t.until[key] = until
	}
	t.added++
	if t.added >= sweepEvery {
		t.added = 0
		for k, u := range t.until {
			if u <= now {
				delete(t.until, k)
			}
		}
	}
}

// seenUntil returns the time (ns) until which the blob named hash is kept
// because a client saw it: 0 or a time past if none did lately.
func (s *Store) seenUntil(hash string) int64 {
	var key [32]byte
	if len(hash) != 2*len(key) {
		return 0
	}
	if _, err := hex.Decode(key[:], []byte(hash)); err != nil {
		return 0
	}
	t := &s.seen
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(t.floor, t.until[key])
}

// seenNow reports whether the blob named hash is kept at now (ns) because
// a client saw it.
func (s *Store) seenNow(hash string, now int64) bool { return s.seenUntil(hash) > now }

// seeAll counts every blob as seen at now: the store was just opened.
func (s *Store) seeAll(now time.Time) {
	s.seen.mu.Lock()
	s.seen.floor = now.Add(s.blobGrace).UnixNano()
	s.seen.mu.Unlock()
}
