// Package store is kvfs's engine room: it ingests files into deduplicated
// chunks, commits them under names, and serves them back, with no FUSE in
// sight. The filesystem and the command line are thin layers over it.
//
// A store directory holds kvfs.db (the manifest index), journal/ (its
// write-ahead journal: journal.go), packs/ (chunk bytes) and spool/ (files
// being written through a mount). Only one process opens a store at a
// time: bbolt's file lock enforces it (the journal is opened under it).
//
// Ingest reads a source once. Snapshots (.mlxkv files that parse) are cut
// row by row, reusing the chunks of their parent — the committed snapshot
// of the same layout with the longest common token prefix — for as long as
// the bytes match, then every C bytes; their holes are stored as zero runs.
// Files in a "blocks" directory and all other files are cut every C bytes
// from their start. New chunks are appended to one of a few size-bounded
// packs that concurrent ingests share (packslot.go), and each ingest syncs
// its packs once; then one transaction commits the manifest, the
// refcounts, the packs' committed lengths and the name, checking again
// that every reused chunk still exists (a chunk freed meanwhile is written
// again from the source). The transaction
// is a journal record, synced before the commit returns (concurrent
// commits share the sync); changes of names and attributes are journal
// records synced by the next sync of anything (journal.go).
//
// A file written through the mount arrives as a spool file; when it is
// large (16 MiB or more) and most of it is new, the spool itself becomes a
// pack (adopt.go). Engine blocks are
// kept alive by blob records while format-5 manifests list them
// (blobs.go).
//
// Chunks are released when the last committed manifest listing them goes:
// on remove or replace, or on the last close of a file removed while open.
// A released chunk leaves the index in that same transaction, and its range
// is punched out of its pack after the commit.
package store
