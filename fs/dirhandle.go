package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// dirHandle is an open directory: its listing, and the answers to the
// lookups that the kernel's READDIRPLUS asks with each entry.
//
// The kernel lists a FUSE directory with READDIRPLUS (go-fuse does not ask
// for READDIRPLUS_AUTO), a batch of entries per request, each with its
// attributes and inode. go-fuse gets those from a lookup per entry; with
// the node's Lookup, that is a store transaction per entry, most of the
// time of the engine's collect scan of a blocks directory. The handle
// reads the listing and every entry's attributes in one transaction
// (store.ReadDirAttr) and answers the lookups from it, as long as it
// describes the store as it is: entries are described as they are when the
// kernel's request arrives, as the node's Lookup would describe them.
//
//   - The listing's attributes serve every batch while the store has not
//     changed since it was read (store.Changes, the journal's sequence
//     number). Once it changed (or without the journal, which has no such
//     mark), each batch reads its entries again in one transaction
//     (store.LookupAttrs) before it answers: attributes read before the
//     request could be older than what the kernel has (a commit's size,
//     a chmod), and the kernel would take them, since it keeps only
//     attributes newer than the start of its request. Names cannot change
//     during a request: the kernel holds the directory's lock shared while
//     it lists, and every create, unlink and rename holds it exclusively.
//   - A name that is gone when its batch is read again is left out, and a
//     name that another file took is listed with that file's inode: the
//     listing is the directory as it was at opendir or rewinddir, less what
//     went since, and never a wrong inode for a name (names created since
//     may be missing, as POSIX allows).
//   - A file this mount is writing is described under its lock with the
//     size and times of its writes (dirNode.lookupFrom), and one that was
//     committed since its batch was read, the /.kvfs name and any name
//     the handle did not list are looked up by the node's Lookup.
//
// A batch is one READDIRPLUS request: go-fuse passes one context to every
// call it makes for a request (rawBridge.readDirMaybeLookup), and the
// handle keeps the last one, so that a new one cannot be allocated at its
// address. Should go-fuse pass a context per call (or another kind than
// *fuse.Context), each entry is read again on its own once the store has
// changed, as the node's Lookup does: slower, still correct.
// go-fuse calls a handle's methods one at a time (under its handle lock).
type dirHandle struct {
	d *dirNode
	// ents is the listing, "." and ".." first; entries past the two are
	// the store's, with their attributes as read last (nil: gone).
	ents []fuse.DirEntry
	info []*store.FileInfo // info[i] describes ents[i+2]
	// index finds an entry's position in ents by its name.
	index map[string]int
	// pos is the position of the next entry to list; an entry's offset
	// (fuse.DirEntry.Off) is its position plus one, which Seekdir takes.
	pos    int
	loaded bool
	// mark is the store's change mark (store.Changes) when info was read
	// whole; 0 when there is none or parts were read again since.
	mark uint64
	// batch is the context of the request that fresh serves; fresh is
	// the range of info read during it (or since mark).
	batch    *fuse.Context
	fresh    [2]int
	listed   int // entries listed in this batch
	lastSize int // entries listed in the previous batch
}

// batchMin is the fewest entries a batch reads again at once. A
// READDIRPLUS request of 8 KiB holds about 35 entries of 64-character
// names, one of 32 KiB (ls) four times as many; a batch reads twice as
// many as the last one listed, so that one transaction serves it.
const batchMin = 64

// OpendirHandle opens the directory for listing: the listing is read at
// the first READDIR(PLUS), not here.
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{d: d}, 0, 0
}

// load reads the listing and its entries' attributes in one transaction.
func (h *dirHandle) load(ctx context.Context) syscall.Errno {
	s := h.d.fsys.s
	mark := s.Changes()
	h.d.fsys.Metrics.ListingReads.Inc()
	infos, err := s.ReadDirAttr(h.d.ino.Load())
	if err != nil {
		return h.d.fsys.errno("readdir", err)
	}
	h.ents = dotEntries(&h.d.Inode, len(infos))
	h.index = make(map[string]int, len(infos))
	for _, fi := range infos {
		h.index[fi.Name] = len(h.ents)
		h.ents = append(h.ents, fuse.DirEntry{Name: fi.Name, Ino: fi.ID, Mode: unixMode(fi.Mode)})
	}
	h.info, h.mark, h.loaded = infos, mark, true
	// The listing is this request's batch.
	h.d.fsys.Metrics.ListingBatches.Inc()
	h.batch, _ = ctx.(*fuse.Context)
	h.fresh, h.lastSize, h.listed = [2]int{0, len(infos)}, 0, 0
	return 0
}

// Readdirent returns the next entry that is still there, with its inode
// as of this request.
func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !h.loaded {
		if e := h.load(ctx); e != 0 {
			return nil, e
		}
	}
	for h.pos < len(h.ents) {
		i := h.pos
		h.pos++
		de := h.ents[i]
		de.Off = uint64(h.pos)
		if i < 2 {
			return &de, 0
		}
		fi, e := h.attr(ctx, i-2)
		if e != 0 {
			h.pos--
			return nil, e
		}
		if fi == nil {
			continue // gone since the listing
		}
		h.listed++
		de.Ino, de.Mode = fi.ID, unixMode(fi.Mode)
		return &de, 0
	}
	return nil, 0
}

// Seekdir moves to the entry after offset off (telldir's value, or 0:
// rewinddir, which reads the directory again, as POSIX asks).
func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == 0 {
		h.loaded, h.pos = false, 0
		return 0
	}
	if !h.loaded {
		if e := h.load(ctx); e != 0 {
			return e
		}
	}
	if off > uint64(len(h.ents)) {
		return syscall.EINVAL
	}
	h.pos = int(off)
	return 0
}

// Lookup answers the lookup of an entry that READDIRPLUS returns, from
// the attributes read for this request (see dirHandle).
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	i, ok := h.index[name]
	if !ok || h.d.reserved(name) {
		return h.d.Lookup(ctx, name, out)
	}
	fi, e := h.attr(ctx, i-2)
	if e != 0 {
		return nil, e
	}
	if fi == nil {
		return h.d.Lookup(ctx, name, out) // gone: as Lookup says
	}
	return h.d.lookupFrom(ctx, name, fi, out)
}

// attr returns the attributes of info[i] as of this request, reading them
// again with the batch they start if they may be older (nil: gone).
func (h *dirHandle) attr(ctx context.Context, i int) (*store.FileInfo, syscall.Errno) {
	if c, ok := ctx.(*fuse.Context); !ok || c != h.batch {
		h.batch, h.lastSize, h.listed = c, h.listed, 0
		h.d.fsys.Metrics.ListingBatches.Inc()
		h.fresh = [2]int{}
		if h.mark != 0 && h.d.fsys.s.Changes() == h.mark {
			h.fresh = [2]int{0, len(h.info)}
		}
	}
	if i < h.fresh[0] || i >= h.fresh[1] {
		if e := h.reread(i, min(len(h.info), i+max(batchMin, 2*h.lastSize))); e != 0 {
			return nil, e
		}
	}
	return h.info[i], 0
}

// reread reads the attributes of info[lo:hi] again, in one transaction.
func (h *dirHandle) reread(lo, hi int) syscall.Errno {
	names := make([]string, 0, hi-lo)
	for _, de := range h.ents[2+lo : 2+hi] {
		names = append(names, de.Name)
	}
	h.d.fsys.Metrics.ListingReads.Inc()
	infos, err := h.d.fsys.s.LookupAttrs(h.d.ino.Load(), names)
	if err != nil {
		return h.d.fsys.errno("readdir", err)
	}
	copy(h.info[lo:hi], infos)
	h.fresh, h.mark = [2]int{lo, hi}, 0
	return 0
}

var (
	_ gofs.NodeOpendirHandler = (*dirNode)(nil)
	_ gofs.FileReaddirenter   = (*dirHandle)(nil)
	_ gofs.FileSeekdirer      = (*dirHandle)(nil)
	_ gofs.FileLookuper       = (*dirHandle)(nil)
)
