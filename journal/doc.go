// Package journal is kvfs's write-ahead log: an append-only sequence of
// records, each with a sequence number, kept in preallocated segment
// files (STORE/journal/000001.seg, …) that are recycled once the caller
// no longer needs their records.
//
// # Use
//
//	j, err := journal.Open(dir, journal.Options{Logger: log})
//	err = j.Replay(checkpointSeq, apply)  // records after the last checkpoint
//	seq, err := j.Append(record)          // cheap: buffered, no I/O
//	err = j.Sync(seq)                     // seq and everything before it durable
//	err = j.Write(seq)                    // or only in the file: survives a killed process
//	…
//	// after the records <= seq are applied and synced elsewhere:
//	err = j.Truncate(seq)
//
// Sync is a group commit: concurrent callers share one fdatasync. The
// first caller to find no sync in progress becomes the leader: it takes
// every record appended so far, writes them with one write per segment,
// fdatasyncs, and wakes the others; those whose record it covered return,
// the rest elect the next leader, whose batch holds everything appended
// meanwhile. A caller whose record is already durable returns at once.
//
// # Format
//
// A segment is a header and records back to back (format.go has the
// byte layout). The header holds a magic, a version, the segment's epoch
// (64 random bits drawn each time the segment is put to use) and the
// sequence number of its first record, under a CRC32C; an all-zero header
// marks a free segment. A record holds a magic and version, the payload
// length, its sequence number, a synced watermark (every record up to it
// was durable when this one was appended), the segment's epoch, the
// payload, and a CRC32C (Castagnoli) of all of that. A record is valid
// only if its CRC checks, its sequence number is the next expected one,
// and its epoch is the segment's. Lengths above Options.MaxPayload (or
// past the segment's end) are invalid, so a damaged length cannot make
// recovery allocate more than that.
//
// # Why preallocated segments
//
// fdatasync must flush whatever metadata is needed to read the data back.
// Appending to a file grows it, so each fdatasync of an appended file
// also commits the inode's new size through ext4's journal: a second
// write and flush. On ext4 even a write into fallocated space converts an
// unwritten extent to written, a metadata change too. A segment is
// therefore created at its full size and written once with zeros (and
// fsynced, under a temporary name, then renamed), or recycled from a
// segment a Truncate freed: appending overwrites blocks that are already
// allocated and written, and its fdatasync flushes the data alone. A new
// segment is made in the background ahead of need, so a segment switch
// does not wait for 64 MiB of zeros.
//
// # Crash safety
//
// What is durable when Sync(seq) returns: every record <= seq, written
// to its segment and covered by a successful fdatasync of that segment.
// Earlier segments were fdatasynced when the log moved past them (below).
// Segment files exist with their full size before they are used (created
// with fsync, rename and a directory fsync).
//
// Why damage can only be a torn tail. Records are written in sequence
// order. A crash can leave any subset of the pages written since the last
// fdatasync, so the records after the last successful Sync may be
// missing, torn, or present in any pattern, but nothing before it: a
// record is acknowledged only after an fdatasync that covered it and
// every earlier record. Two rules keep the damage at the end:
//
//   - A segment switch fdatasyncs the old segment before the new one's
//     header is written. A segment header on disk therefore proves that
//     every record before its first sequence number is durable: only the
//     last segment may end in a torn tail, and in an earlier segment a
//     record that does not verify, or a gap before the next segment's
//     first sequence number, is a CorruptError naming the file and offset.
//
//   - In the last segment, recovery stops at the first record that does
//     not verify and looks past it for valid records of the segment's
//     life. If one of them carries a synced watermark at or above the
//     damaged record's sequence number, the damaged record was durable
//     before that one was even appended: committed data is damaged, and
//     Open fails with a CorruptError naming the file and offset. Otherwise
//     the damage and everything after it were written by the last batch,
//     which no Sync acknowledged (pages reach the disk in any order): that
//     tail is dropped with a log line.
//
//   - A segment's header is synced with its first records. A segment
//     whose header is zeros or does not verify, but whose records (from
//     the header's end) continue the journal's sequence and include one
//     appended after the first of them was durable, had a header and lost
//     it to damage: Open fails with a CorruptError naming the segment,
//     instead of taking it for a free one. Without such a record, the
//     header's write was torn with its records, which no Sync covered.
//
// What recovery cannot tell from a torn write: damage to the records of
// the very last Sync (or to the header of a segment holding only them),
// with no later record written after it returned: they are dropped as a
// torn tail (with a warning naming the offset), exactly as if the crash
// had come before that Sync; and a segment file removed from the
// directory: nothing left on disk says that it existed. Telling these
// apart would cost a second synced write per Sync.
//
// Why recycled bytes are never taken for records. A recycled segment
// still holds its earlier records past the new ones. Its header is
// zeroed (and synced) when Truncate frees it and rewritten with a new
// random epoch when it is reused; records of the earlier life carry the
// old epoch and lower sequence numbers, so they fail the epoch check and
// the sequence check, and their CRCs cannot vouch for them. When recovery
// drops a tail after which valid records of the current life remain, it
// seals that segment (new records go to a new one, with a new epoch; a
// segment left without one valid record gets a new epoch itself), so
// those leftovers can never pass for records written later at the same
// offsets. Recovery also fdatasyncs what it found before calling it
// durable: after a process kill, records may have been in the page cache
// only.
//
// Failures: a failed write or fdatasync poisons the journal (ErrFailed):
// after a failed fdatasync the kernel may have dropped the dirty pages
// and a retry can report success for data that never reached the disk
// ("fsyncgate"), so no later Append or Sync succeeds. Reopening recovers
// from what the disk holds.
//
// # What the caller must do
//
// Records are the caller's redo log. Keep the state the records produce
// elsewhere (for kvfs, the bbolt index), and checkpoint: apply the
// records up to some seq there, make that durable, record seq there in
// the same transaction, and only then call Truncate(seq). At open, call
// Replay(seq) with the checkpointed seq and apply what it yields: exactly
// the records after it, whether or not Truncate ran before the crash.
// Never Truncate past what the checkpoint made durable: freed segments
// are reused at any time. Append does no I/O unless Options.BufferSize
// bytes are waiting; Replay's callback must not call the Journal.
package journal
