package manifest

import "fmt"

// keyJournaled, in the meta bucket, marks an index that has been opened
// in journal mode. From then on it must always be opened with its
// journal: bbolt alone lacks the records after the last checkpoint, and
// opening it plain would silently lose them (and let plain writes diverge
// from what a later replay would redo). The store sets it on its first
// journal-mode open and refuses to open a marked index without the
// journal.
var keyJournaled = []byte("journaled")

// Journaled reports whether the index has been opened in journal mode
// (SetJournaled).
func (t *Tx) Journaled() bool { return len(t.b(bucketMeta).Get(keyJournaled)) > 0 }

// Schema is the index's schema version (SchemaVersion once journaled).
func (t *Tx) Schema() uint64 { return getU64(t.b(bucketMeta), keyVersion) }

// SetJournaled marks the index as one that must be opened in journal
// mode from now on.
//
// The schema version goes up with the mark (SchemaVersion): a kvfs from
// before the journal knows nothing of the mark, but refuses a version it
// does not read.
func (t *Tx) SetJournaled() error {
	meta := t.b(bucketMeta)
	if err := meta.Put(keyJournaled, []byte{1}); err != nil {
		return fmt.Errorf("mark index journaled: %w", err)
	}
	if err := putU64(meta, keyVersion, SchemaVersion); err != nil {
		return fmt.Errorf("mark index journaled: %w", err)
	}
	return nil
}

// LastSeq is the sequence number of the last journal record committed
// (0 in plain mode): a Sync(LastSeq()) makes every transaction committed
// before the call durable.
func (db *DB) LastSeq() uint64 {
	if db.j == nil {
		return 0
	}
	return db.j.cur.Load().seq
}

// Checkpointed is the sequence number of the last journal record that a
// checkpoint wrote to bbolt (0 in plain mode): an open replays only the
// records after it.
func (db *DB) Checkpointed() uint64 {
	if db.j == nil {
		return 0
	}
	return db.j.ckptSeq.Load()
}

// Journaled reports whether the DB runs in journal mode.
func (db *DB) Journaled() bool { return db.j != nil }
