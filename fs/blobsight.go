package fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// The engine checks whether blocks/<sha256> exists, skips the block when it
// does, and commits the manifest that lists it last (FORMAT.md §4.3). The
// store keeps a block that a client saw exist for the grace period after
// that sighting (store/seen.go), but it only knows of the checks that reach
// the daemon: one the kernel answers from its cache is invisible. So the
// entries of blocks directories are cached briefly, and every answer that
// tells a client a block exists is reported as a sighting that the client
// may go on seeing for as long as the kernel caches it:
//
//   - a lookup (stat, access, open by name, the existence check itself):
//     cached for blobTimeout, a sighting;
//   - a getattr of a block: cached for blobTimeout, a sighting;
//   - an entry of a listing (READDIRPLUS): no node at all
//     (dirNode.lookupFrom), so that a later check looks the name up (a
//     timeout, however short, is at least a jiffy to the kernel, and a
//     collect's listing of every block must not keep them all);
//   - a file created in a blocks directory (<sha256>.tmp, renamed onto
//     <sha256> once written): cached for blobTimeout, which the rename
//     keeps; the new blob is kept for the grace period after it is
//     committed anyway (store: young blobs are never evicted).
//
// A file renamed into a blocks directory from elsewhere keeps the kernel
// entry it had; its entry is invalidated after the rename (dirNode.Rename).

// blobTimeout is how long the kernel caches the entries and attributes of
// blocks directories' files: the round trip it costs an existence check
// against how long a sighting keeps a block past the grace period.
const blobTimeout = time.Second

// inBlocks reports whether d is a blocks directory (by the name the kernel
// knows it by).
func (d *dirNode) inBlocks() bool {
	name, _ := d.Parent()
	return name == "blocks"
}

// blobEntry makes the reply to a lookup of fi in d one that the kernel
// caches briefly if d is a blocks directory or fi a blob, and records that
// the caller saw the blob.
func (d *dirNode) blobEntry(fi *store.FileInfo, out *fuse.EntryOut) {
	if fi.Blob == "" && !d.inBlocks() {
		return
	}
	out.SetEntryTimeout(blobTimeout)
	out.SetAttrTimeout(blobTimeout)
	if fi.Blob != "" {
		d.fsys.s.SawBlob(fi.Blob, blobTimeout)
	}
}

// blobAttr is blobEntry for a getattr of a file.
func (f *fileNode) blobAttr(fi *store.FileInfo, out *fuse.AttrOut) {
	if fi.Blob == "" {
		return
	}
	out.SetTimeout(blobTimeout)
	f.fsys.s.SawBlob(fi.Blob, blobTimeout)
}
