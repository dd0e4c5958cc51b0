// Package blockstore keeps chunk bytes: content named by sha256, appended to
// pack files, read back by location.
//
// A chunk is written once, at the end of a pack, and never moves: its
// location (pack, offset, length) is what the manifest index records next
// to its ID. Packs are plain files of concatenated chunk bytes, so a range
// of a chunk is a range of a file, which the FUSE layer can splice to the
// kernel without copying. Nothing in a pack says where chunks begin; the
// index does, and each pack's committed length in the index says how much of
// it is meaningful. Bytes past that length are the leftovers of an ingest
// that crashed or failed, and Appender cuts them off before appending.
//
// Durability is the caller's protocol: append the chunks of one ingest,
// call Appender.Sync once (one fsync per pack, never per chunk), and only
// then commit a manifest that refers to them. Several ingests may append to
// one pack at once (an Appender is safe for concurrent use); which of their
// ranges a committed length may cover is the store's protocol
// (store/packslot.go).
package blockstore
