// Package manifest is kvfs's index: one bbolt file (STORE/kvfs.db) that
// holds the namespace tree, each file's manifest, the chunk index with
// refcounts, the blob and snapshot indexes, open-file orphans and pack
// states.
//
// Glossary:
//
//   - Inode: a file or directory, numbered; the root directory is RootIno.
//   - Dirent: a name in a directory, pointing at an inode.
//   - Manifest: the ordered extents of a committed file: whole chunks, by
//     ID, or runs of zeros (the holes of a whole-layout snapshot).
//   - Chunk record: where a chunk lies (blockstore.Loc) and its refcount,
//     the number of committed manifests that list it (a manifest that lists
//     a chunk twice counts once).
//   - Blob: a file under a directory named "blocks" whose name is the
//     sha256 of its content; indexed by that hash.
//   - Snapshot index: committed .mlxkv files by layout key, with their
//     tokens, for finding the parent of a new snapshot.
//   - Orphan: an inode whose last name was removed while it was open; its
//     chunks are released when it is closed, or when the store next opens.
//   - Pack state: how many bytes of a pack are committed, and how many of
//     those are dead (chunks whose refcount fell to zero).
//
// Every change of names, manifests and refcounts happens in one DB.Update,
// so a crash leaves either the old state or the new one. Values read in a
// transaction are decoded into fresh memory: no byte slice outlives its
// transaction (bbolt's caveat).
//
// # Journal mode
//
// Opened WithJournal, the DB commits a transaction without a synced bbolt
// transaction (two fdatasyncs): it appends the transaction's mutations as
// one record to a write-ahead Log (record.go gives the encoding) and keeps
// them in memory, in the overlay, until a checkpoint writes many
// transactions' worth to bbolt at once. Without WithJournal the DB is
// plain: each Update is a synced bbolt transaction, as before.
//
// The package reaches bbolt only through Tx.b (bucket.go), so a
// transaction reads through layers, newest first: its own writes (a
// write transaction's mutations: key → value or tombstone, so that it
// reads what it wrote), the overlay version it started on, and a bbolt
// read transaction. Get takes the first layer that holds the key; a
// cursor merges the three in key order; a tombstone hides the key below.
// Writers are serialized (as bbolt's are). At commit, the writer appends
// the record (Log.Append: sequence number s) and publishes a new overlay
// version, the last one plus its mutations. Versions are immutable
// (copy-on-write B-trees, overlay.go), so a reader takes one with an
// atomic load and no lock, and sees it whole or not at all. The commit
// returns before the record is durable; UpdateSeq's number given to Sync
// (or UpdateSync) waits for that, and a Sync covers every earlier record
// too (the log is ordered).
//
// A checkpoint takes the current version V (up to record S) and applies
// all its entries to bbolt in one synced bbolt transaction that also
// stores S in the meta bucket (journalSeq). Then it drops from the
// current version the entries it applied, each only if the current
// version still holds that very entry (a writer that changed the key
// since holds a newer one, which stays); then it runs AfterCheckpoint and
// truncates the log up to S. Writers go on during the bbolt transaction;
// the drop takes the writer lock a batch at a time.
//
// Consistency of a reader. A transaction begins a bbolt read transaction
// B and then loads the current version O. Every checkpoint that B
// includes applied a version published before it began, so O is at least
// as new: for each key, O holds the newest entry unless a checkpoint
// dropped it, and an entry dropped was in bbolt, with that value, before
// the drop, and no later checkpoint wrote a different value for the key
// without O holding it. So B and O together are the state as of O's last
// record, provided B includes every checkpoint whose entries O lacks.
// Each version records that (dropped); if B predates it (a checkpoint
// committed and dropped between B's begin and O's load), the reader
// begins again, and the second try sees the commit. A reader that begins
// between a checkpoint's bbolt commit and its drop sees entries in O
// equal to or newer than bbolt's: consistent without a lock.
//
// Crash safety and replay. A crash leaves bbolt as of its last checkpoint
// S (bbolt's own transactions are atomic and synced) and the log with a
// prefix of the records appended since, at least up to the last Sync.
// Open reads S from bbolt and replays the records after S into the
// overlay (rebuilding it rather than writing bbolt, so that an open
// writes nothing). Replay is idempotent: a record up to S is in bbolt
// (the checkpoint that applied it stored S in the same transaction) and
// is skipped; a record after S is not, and its mutations are whole
// values, not increments, so applying one twice (a crash between a
// checkpoint's commit and the truncation) gives the same state. The
// state after recovery is the state as of the last record that survived,
// records in order: never a later record without an earlier one.
// Records up to S that the log lost (never synced) are in bbolt; that is
// why a checkpoint may apply records not yet durable. Open also calls
// Log.Truncate(S) first, so that a log that lost its tail numbers its
// next records after S, not among the numbers bbolt has already.
//
// The caller may append records of its own to the Log (the store's chunk
// bytes), marked by their first byte (RecordData); replay hands them to
// ReplayData in order with the index's records and skips them otherwise.
//
// Irreversible effects of a record (the store punching the chunks it
// freed) must wait until the record cannot be lost: AfterCheckpoint runs
// once bbolt holds it. The overlay's memory is bounded by checkpoints in
// the background when it holds more than MaxEntries entries or MaxBytes
// bytes, or every Interval; Close checkpoints what is left.
//
// A long read transaction delays a checkpoint that grows bbolt's file
// (bbolt's remap waits for readers), and new transactions wait behind
// it, as plain mode's Update does: a transaction must not begin another
// (View inside Update or the reverse) on the same goroutine.
package manifest
