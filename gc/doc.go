// Package gc keeps a store sound and inside its budget: kvfs fsck
// (fsck.go); kvfs gc, the compaction of mostly dead packs (compact.go; the
// work is store.Compact); and capacity and retention (retention.go: the
// eviction order, pure; evict.go: the passes and the daemon's evictor,
// over the store's candidates and removals in store/evict.go).
//
// The checks and the repairs themselves live in the store (store.Problems,
// store.Uses, store.Repair): they read and change the index in one
// transaction each, with the store's own record types, and Problems is the
// same invariant checker every store test ends with, so there is one
// definition of "consistent". What gc adds is policy: which checks to run,
// how a problem is named for an operator (file, chunk, pack offset), when
// to repair, and the exit statuses.
package gc
