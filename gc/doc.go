// Package gc keeps a store sound: today, kvfs fsck (fsck.go); capacity,
// retention and compaction are to come here too (see DESIGN.md).
//
// The checks and the repairs themselves live in the store (store.Problems,
// store.Uses, store.Repair): they read and change the index in one
// transaction each, with the store's own record types, and Problems is the
// same invariant checker every store test ends with, so there is one
// definition of "consistent". What gc adds is policy: which checks to run,
// how a problem is named for an operator (file, chunk, pack offset), when
// to repair, and the exit statuses.
package gc
