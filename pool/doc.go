// Package pool lets several hosts share one prompt-cache pool: chunks and
// manifests as immutable objects in an S3-compatible object store, names
// and coordination in etcd (docs/DESIGN.md, "Scale-out"). Pool is one host's
// handle: Publish, Open (a File read with ReadAt), Stat, List, Rename,
// Remove, Collect. kvfs mount --pool serves it as a filesystem (fs/poolfs);
// kvfs pool and kvfs gc --pool use it from the command line.
//
// # What exists and what does not
//
// Built and tested against real servers (etcd, and versitygw for S3, as
// scripts/services starts them): publish with dedup against chunks any
// host published, reads verified chunk by chunk through a bounded local
// cache, the collector, lease loss and retry, kills mid-publish, and
// services going away and coming back; two mounts sharing one pool
// (tests/poolmount_test.go), the rewriting of sparse packs, capacity
// eviction of names, prefix matching across hosts (kvfs match --pool), and
// the /.kvfs tree in a pool mount (fs/poolfs/ctl.go: MatchKey,
// Candidates).
//
// # Objects and names
//
// Files are cut as a local store cuts them (store.Cut; chunks of at most
// Config.ChunkSize, 1 MiB by default): the rows of a snapshot, a
// llama.cpp state file or a safetensors cache where its parent's chunks
// end, bytes of no parsed format by content (parent.go). A file that
// would need more chunks than a manifest holds when cut at its parent's
// (a long llama.cpp conversation with a transposed V gains one per
// channel per save) is cut without a parent instead. Chunks a
// publish does not find in the pool travel in immutable pack objects
// (PREFIX/packs/<sha256 of the pack>, 32 MiB by default), so that a
// snapshot is a few PUTs, not thousands. A manifest object
// (PREFIX/manifests/<sha256 of its bytes>, JSON: manifest.go) lists every
// chunk's sha256 with its length, pack object and offset, so that any
// host reads any file with ranged GETs (one per run of chunks that lie
// next to each other in a pack) and checks every chunk. Manifests of
// version 1, written before 2026-12-03 (every chunk the chunk size but
// the last), still read; a host that reads only version 1 refuses a
// version 2 manifest, naming its version: upgrade every host of a pool
// before any of them publishes. Objects are never
// overwritten: a name is its content's hash. etcd holds, under
// kvfs/BUCKET/PREFIX#/, names/<path> → manifest hash, the only roots, and
// the publish keys, the sweep fence and the collectors' lock (coord.go).
//
// # Reading
//
// Open resolves the name, reads the manifest (checked against its hash,
// then parsed as untrusted input; a manifest this host read before is not
// read again: they are immutable) and checks that the packs it needs
// exist: a missing object is fs.ErrNotExist at open. A pack whose chunks
// of the file are all in the local cache is not asked about: the file's
// reads are served from the cache, checked there. A read fetches each
// chunk from the local cache or with one ranged GET, and checks its
// sha256: a chunk gone or damaged after the open is an EIO for that read,
// never wrong bytes; so is a chunk whose length the manifest contradicts.
// Chunks read are kept in the host's cache (cache.go), hashed at their
// first read by the process (at every read with Config.VerifyCache, kvfs
// mount --verify), so that opens and reads of them go on, at the cache's
// speed, while S3 is unreachable or hung (TestS3Hangs). A chunk whose
// pack is gone is looked for where the names now place it (a rewrite
// moved it, below) and read from there if its sha256 matches: a file
// opened before a rewrite reads on.
//
// # Dedup across hosts
//
// Before a publish, a host reads the manifests of names it has not seen
// (once each: manifests are immutable), and so knows which chunks the
// pool holds and where. With a cache directory, it keeps the manifests it
// learned in a local bbolt index (knowledge.go), so that it still knows
// them after a restart; memory and the index are bounded, and start over
// past their bounds. That knowledge is only a hint: the publish
// verifies every pack it reuses (below), and reads and hashes, once per
// process, every chunk's place that it knows only from a manifest: a
// manifest that lies about a chunk's place (a faulty host, or anyone who
// can write to the bucket) must not make every later publish of that
// chunk by honest hosts unreadable. A prefix-growth series published
// alternately through two hosts stores each chunk once (TestTwoHostsShare),
// and, cut at its parents' chunks, within 1.05× of what a local store
// keeps of it (TestPrefixSeriesAcrossHosts: 1.007× for the engine's
// whole layout, 1.000× for llama.cpp files with a transposed V).
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
//     still exist (a daemon whose lease expired publishes nothing), and no
//     name under path/ or at its parents (a name is never a file and a
//     directory at once: ErrNameConflict);
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
// # Rewriting sparse packs
//
// A pack stays whole while any chunk in it is live, so removing names
// frees little when the packs they used hold chunks other names share.
// Before it fences, a collector with a threshold (kvfs gc --pool
// --threshold, default 0.5) rewrites every pack older than the grace
// period whose dead fraction is at least the threshold (repack.go): it
// copies the live chunks, each checked, into new packs, writes for each
// name that used such a pack a manifest that uses the copies, and moves
// the name in a transaction that requires the name's old value. The old
// packs are then unreached, and the same collection's sweep deletes them.
// The rewrite is a publish in every respect that the argument below uses:
// it holds a publish key while it uploads the new packs and verifies
// (HEAD) every other pack its manifests keep, and it moves names only
// while the key exists. A name published or removed meanwhile keeps its
// new state (the move is skipped), and whatever that state reaches stays
// live by the argument for that publish. (TestRepack; the collector of
// TestCollectRacesPublishes rewrites packs as the publishers replace and
// remove the names that use them.)
//
// # Prefix matching across hosts
//
// A publish of a file named *.mlxkv (or *.mlxkv.tmp, the engine's
// temporary name, renamed after) whose header parses records in its
// manifest the snapshot's model, namespace, token-chain keys
// (docs/PREFIX.md) and trim limits (manifest.go, SnapInfo). Pool.Match
// (match.go; kvfs match --pool) lists the names, reads each manifest once
// per host (they are immutable), and takes as candidates the snapshots
// whose keys share the prompt's first groups, deepest first. A manifest
// is untrusted: each candidate that may win is opened and its own header
// read through checked chunks, and the single-host lookup's rules decide
// (store.Rejection, store.Better; the earliest published name wins a tie).
// A manifest without a record (a file renamed into a .mlxkv name) gets one
// made from its header at its first lookup on each host. (TestMatch, with a
// manifest that lies; TestPoolMountTwoHosts through two mounts.)
//
// # Capacity
//
// etcd also holds used/<path>: when the file was last published or opened,
// by any host (Unix seconds; a host records an open of one name at most
// once a minute, so a file read in a loop costs one etcd write a minute).
// It moves with a rename and goes with a removal. A collector with a
// capacity (kvfs gc --pool --capacity SIZE --min-idle D, evict.go) first
// removes names, least recently used first, while the bytes of the
// distinct chunks the names reach exceed SIZE, passing over every name
// used within D (default 1 h). Each removal is a transaction that requires
// the name and its last use to be as read, so a name published or opened
// while the collector decides stays. The objects of removed names then go
// as any unreached object does: the sweep, with the rewrite of the packs
// they shared. Removing names only removes roots, so the argument below
// is unchanged. (TestEvict; TestPoolCommands through the command line.)
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
// # Failures
//
// Every call to S3 or etcd is bounded (Config.OpTimeout): a service that
// does not answer fails the operation with an error that names it. Each
// service has a circuit breaker (breaker.go): a call that it does not
// answer in time, or whose connection fails, opens the circuit, and calls
// to the service then fail at once (ErrS3Down, ErrEtcdDown: the error
// names the endpoint and the failure) instead of after OpTimeout each,
// until a probe, every second, finds it answering again. The log says
// once that the circuit opened and once that it closed. What needs the
// service thus fails after at most one OpTimeout, and at once after
// that; what the host can serve without it (cached chunks, files already
// open; in a pool mount, the names and versions it last saw) does not
// wait on it at all (TestS3Hangs, TestEtcdHangs; through mounts,
// tests/poolhang_test.go). A session whose lease expired is replaced by
// a new one at the next publish, so a host recovers without a restart
// once etcd is back.
//
// # A host that dies
//
// A daemon SIGKILLed during a publish (tests/poolpublishkill_test.go kills
// one, through $KVFS_TEST_CRASH_AT (crashpoint.go), with the publish key
// written and nothing uploaded, between pack uploads, with the packs and
// not the manifest, with the manifest and not the name, and with the name
// written and the close not told) leaves no name that points to a missing
// object, and every file whose fsync or close returned reads back whole on
// every host. The file being published is absent, or (killed after its
// name was written, though its close failed) whole. What it uploaded is
// held by its publish key until its lease goes; a pool mount started again
// on the same directory revokes its predecessor's lease at once (TakeOver:
// the lease is recorded in STORE/spool/lease, and the spool's lock shows
// that predecessor dead), so that its uploads can be collected and its
// claim on a name being created with O_EXCL (Reserve) no longer refuses
// that name, unlisted, with EEXIST on every host. A host that does not
// come back holds both for the lease's TTL (LeaseTTL, 10 s).
//
// # Other users
//
// A file's owner, group and permission bits are kept in etcd beside its
// name (owner.go: attrs/<path>), set in the transaction that publishes
// the name, moved by a rename and removed with the name. A pool mount
// records its creator's (and mode, after the umask) at a create, and
// changes them at a chmod or chown; a file published without them (kvfs
// pool put, or a kvfs before 2026-12-03) shows as the mount's daemon's,
// 0644. A directory's, set by a mkdir or chmod through a mount, are kept
// under attrs/<dir>/ (directories are the prefixes of names; one made
// with no record shows as the daemon's, 0755): an engine's blocks
// directory, made 0700, is 0700 on every host.
// The kernel checks what the mount shows (default_permissions); the /.kvfs
// tree answers a caller only with files it may read. Root passes the
// kernel's checks as ever. The pool itself is guarded by the services,
// not by the mount: the S3 credentials guard the objects, but kvfs talks
// to etcd without authentication or TLS (none is supported yet), so any
// user who reaches etcd's port (any local user, with scripts/services on
// 127.0.0.1) can rename or remove every name and change every owner, the
// mount's permission checks notwithstanding: etcd belongs on a network
// only the pool's hosts reach, on hosts whose users are trusted.
//
// # Tests
//
// The end-to-end tests start etcd and versitygw through scripts/services
// (a fresh pair per test): two hosts sharing files and a prefix series
// (TestTwoHostsShare), damaged and missing objects, collection, a
// collector racing publishes while leases are revoked at random moments
// (TestCollectRacesPublishes), a publisher SIGKILLed at random moments
// (TestKillMidPublish), S3 and etcd stopped and started again
// (TestServicesUnreachable), and hung (SIGSTOP) and resumed (TestS3Hangs,
// TestEtcdHangs).
//
// protocol_test.go checks the argument exhaustively on a small scope (two
// publishes with reuse, a retry after a lease expiry, a name removal, two
// collector rounds, a collector's death; every interleaving), and shows
// that the checker fails the variants that trust what a host knew before
// its publish key existed.
package pool
