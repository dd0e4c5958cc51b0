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
package manifest
