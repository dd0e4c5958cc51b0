// Package fs is the FUSE layer of kvfs: go-fuse nodes and handles over
// store.Store, and nothing else. Every operation translates a FUSE call
// into a store call and a store error into an errno (errno.go, the one
// mapping).
//
// Writes go to a spool per file being written (in memory for a file of up
// to 1 MiB, within a bound for the daemon; in a spool file past it: see
// memspool.go); the spool is ingested
// when the writer calls fsync and when the last writer's handle is flushed
// or released, so the engine's protocol (write a tmp file, fsync, rename)
// commits before the rename. Each commit gives the content a new store
// inode; the file's node follows it, and readers that opened the earlier
// version keep it until they close.
//
// Committed files are immutable, so opens keep the kernel's page cache
// (FOPEN_KEEP_CACHE) unless the node's content changed since its last
// open (macFUSE ignores KEEP_CACHE, so there a changed version purges
// the pages instead: opencache.go), and entries, attributes and missing names (negative entries) get
// long timeouts: every change goes through this daemon, and the kernel
// learns of it from the operation itself, or from Server.Invalidate for
// changes made through the control socket. Names that appear without
// either, blocks/<sha256> adopted at lookup and the /.kvfs views, are
// never kept missing (uncachedMiss). Reads are spliced from the pack files where the kernel allows
// (one chunk: the pack range itself; several: a pipe), and copied
// otherwise. A reply must carry every byte asked for (a short one is end
// of file to the kernel), so a read is spliced only when its pipe buffers
// provably fit (splice_linux.go), and the pack descriptors it splices
// from are held until go-fuse has sent the reply.
//
// The root also holds a virtual, read-only /.kvfs tree (ctl.go): stats,
// and whole/, where blocks-layout snapshots appear resolved into the whole
// layout.
//
// Symbolic links, hard links and device nodes are not supported: kvfs holds
// snapshots, and each file has exactly one name. symlink(2), link(2) and
// mknod(2) fail with EPERM, as on filesystems without them.
package fs
