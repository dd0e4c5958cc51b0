package manifest

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/kvfs/kvfs/blockstore"
)

// Change feed: what each committed write transaction changed, for an
// in-memory view of the index kept up to date by commits instead of by
// walks (the store's eviction candidates, store/candtable.go). It is
// recorded where the transaction writes (bucket.Put and Delete), so that
// no write path can forget it, and delivered after the commit, under the
// same lock as Watch's start: every commit is either seen by start's read
// transaction or delivered to fn, never both, never neither.

// Changes is what one write transaction changed.
type Changes struct {
	// Inodes are the inodes whose record, manifest, attributes, pins, or
	// blob or snapshot index entries were written or deleted.
	Inodes map[uint64]struct{}
	// Blobs are the blobs (sha256, hex) whose record or content was
	// written or deleted.
	Blobs map[string]struct{}
	// Stored is the change in the bytes of live chunks (the sum of the
	// chunk records' lengths).
	Stored int64
	// Chunks are the chunks whose refcount changed to or from 1 or 2
	// (not from 0 or to 0: only the file that wrote or dropped it holds it):
	// those that became, or stopped being, a file's alone (a file with
	// a blob record shares its chunks with the record: 2).
	Chunks map[blockstore.ID]struct{}
}

// watch is a DB's change feed (Watch).
type watch struct {
	mu sync.Mutex // held across each write transaction and Watch's start
	fn atomic.Pointer[func(*Changes)]
}

// Watch calls fn after each write transaction that commits, with what it
// changed; first it runs start in a read transaction while no write
// transaction is in progress, so that start's view and the calls to fn
// together cover every commit once. fn runs while writers wait: it must be
// quick and must not use db. Only one watcher is kept (a later call
// replaces it).
func (db *DB) Watch(start func(*Tx) error, fn func(*Changes)) error {
	db.watch.mu.Lock()
	defer db.watch.mu.Unlock()
	if err := db.View(start); err != nil {
		return err
	}
	db.watch.fn.Store(&fn)
	return nil
}

// watching starts a write transaction's part of the feed: it returns the
// Changes to record into (nil if no one watches) and the function that
// delivers them once the transaction has committed, and that must be
// called (deferred) in any case, since it releases the feed's lock.
func (db *DB) watching() (*Changes, func(committed bool)) {
	db.watch.mu.Lock()
	fn := db.watch.fn.Load()
	if fn == nil {
		return nil, func(bool) { db.watch.mu.Unlock() }
	}
	ch := &Changes{}
	return ch, func(committed bool) {
		defer db.watch.mu.Unlock()
		if committed && (len(ch.Inodes) > 0 || len(ch.Blobs) > 0 || len(ch.Chunks) > 0 || ch.Stored != 0) {
			(*fn)(ch)
		}
	}
}

func (c *Changes) ino(ino uint64) {
	if c.Inodes == nil {
		c.Inodes = map[uint64]struct{}{}
	}
	c.Inodes[ino] = struct{}{}
}

func (c *Changes) blob(hash string) {
	if c.Blobs == nil {
		c.Blobs = map[string]struct{}{}
	}
	c.Blobs[hash] = struct{}{}
}

// note records a write of k in bucket b (v nil: a deletion), before it is
// made: a chunk's old length is read from b.
func (c *Changes) note(b bucket, k, v []byte, del bool) {
	switch {
	case bytes.Equal(b.name, bucketInodes), bytes.Equal(b.name, bucketManifests), bytes.Equal(b.name, bucketPins):
		if len(k) == 8 {
			c.ino(binary.BigEndian.Uint64(k))
		}
	case bytes.Equal(b.name, bucketXattrs):
		if len(k) >= 8 {
			c.ino(binary.BigEndian.Uint64(k[:8]))
		}
	case bytes.Equal(b.name, bucketSnaps), bytes.Equal(b.name, bucketBlobs):
		if len(k) >= 8 {
			c.ino(binary.BigEndian.Uint64(k[len(k)-8:]))
		}
	case bytes.Equal(b.name, bucketBlobRecs), bytes.Equal(b.name, bucketBlobData):
		c.blob(string(k))
	case bytes.Equal(b.name, bucketChunks):
		var was, is uint32
		if old := b.Get(k); old != nil {
			if ch, err := unmarshalChunk(old); err == nil {
				c.Stored -= ch.Loc.Len
				was = ch.Refs
			}
		}
		if !del {
			if ch, err := unmarshalChunk(v); err == nil {
				c.Stored += ch.Loc.Len
				is = ch.Refs
			}
		}
		if was != is && was > 0 && is > 0 && min(was, is) <= 2 && len(k) == len(blockstore.ID{}) {
			if c.Chunks == nil {
				c.Chunks = map[blockstore.ID]struct{}{}
			}
			c.Chunks[blockstore.ID(k)] = struct{}{}
		}
	}
}

// SnapshotTokenCount returns how many tokens the snapshot index holds for
// inode ino under layout key layout (0 if none).
func (t *Tx) SnapshotTokenCount(layout string, ino uint64) int {
	return len(t.b(bucketSnaps).Get(snapKey(layout, ino))) / 4
}

// ViewWatched runs fn in a read transaction that has seen exactly the
// commits delivered to the watcher before at ran: at runs, and the
// transaction starts, while no write transaction is in progress (writers
// wait for at, not for fn).
func (db *DB) ViewWatched(at func(), fn func(*Tx) error) error {
	db.watch.mu.Lock()
	at()
	if db.j == nil {
		tx, err := db.bolt.Begin(false)
		db.watch.mu.Unlock()
		if err != nil {
			return err
		}
		defer tx.Rollback()
		return fn(&Tx{tx: tx})
	}
	tx, v, err := db.snapshot()
	db.watch.mu.Unlock()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(&Tx{tx: tx, j: &jtx{v: v}})
}
