// Package pool will let several hosts share one prompt-cache pool: chunks
// and manifests as immutable objects in an S3-compatible object store,
// names and coordination in etcd (DESIGN.md, "Scale-out"). What exists so
// far is the protocol that keeps a collector from deleting an object a
// name needs, and an exhaustive small-scope check of it (protocol_test.go).
//
// # Objects and names
//
// Chunks travel in immutable pack objects; a manifest object, named by its
// own hash, lists every chunk's sha256 with its pack object and range.
// Objects are never overwritten. etcd holds names/<path> → manifest hash,
// the only roots.
//
// # Publishing
//
// Each daemon holds an etcd session lease. A publish:
//
//  1. creates its publish key, bound to the lease, in a transaction that
//     requires that no sweep fence exists (a publish never starts while a
//     sweep is fenced);
//  2. uploads the objects it needs that it has not verified, and verifies
//     (HEAD) every object it reuses, even one it uploaded itself before the
//     key existed: knowledge from before the key proves nothing (the
//     object may have been swept since);
//  3. sets names/<path> in a transaction that requires its publish key to
//     still exist (a daemon whose lease expired publishes nothing);
//  4. deletes its publish key.
//
// A publish whose key vanished (its lease expired) starts again from 1 with
// a new lease, and verifies again everything it reuses.
//
// # Collecting
//
// One collector, elected through etcd, per round:
//
//  1. marks every object the names reach at revision R;
//  2. puts the sweep fence (bound to its own lease);
//  3. waits until no publish key exists: every publish that started before
//     the fence has published or lost its lease;
//  4. marks every object the names reach now (the names published since R);
//  5. deletes the unmarked objects older than the grace period;
//  6. removes the fence.
//
// # Why no live object is deleted
//
// Take an object X that a name N reaches at some moment. N was set by a
// publish P holding key K, and P uploaded or verified X while K existed
// (step 2), before setting N (step 3). Consider a sweep S that deletes X
// (step 5):
//
//   - If S's fence was put before K was created, K could not be created
//     until the fence was removed, after S's deletes: P's verification came
//     after the delete and found X missing, so P uploaded X again, a new
//     object S never saw.
//   - If S's fence was put after K was created, S waited (step 3) until K
//     was gone. K went either because P finished, and then N was set
//     before S's second marking (step 4) marked X, or because K's lease
//     expired, and then P's step 3 failed and N was never set by P.
//
// Either way S does not delete an object that a name reaches or will
// reach. Names removed meanwhile only remove reasons to keep objects.
//
// The argument assumes one thing about time: a collector whose lease
// expired has stopped deleting before a publish can start after its fence
// went (its deletes stop at half its lease's TTL since its last keepalive;
// bounded clock drift). Should that fail, the grace period (deleting only
// objects older than it, default 1 h) still keeps what publishes uploaded
// lately; an old object a publish reuses relies on the assumption alone.
//
// protocol_test.go checks the argument exhaustively on a small scope (two
// publishes with reuse, a retry after a lease expiry, a name removal, two
// collector rounds, a collector's death; every interleaving), and shows
// that the checker fails the variants that trust what a host knew before
// its publish key existed.
package pool
