package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// dirNode is a directory.
type dirNode struct {
	node
}

func (d *dirNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fi, err := d.fsys.s.StatIno(d.ino.Load())
	if err != nil {
		return d.stale("getattr", err)
	}
	fillAttr(fi, &out.Attr)
	return 0
}

func (d *dirNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetSize(); ok {
		return syscall.EISDIR
	}
	fi, e := d.setattr(ctx, in)
	if e != 0 {
		return e
	}
	fillAttr(fi, &out.Attr)
	out.Ino = d.StableAttr().Ino // the reply is cached (fileNode.Setattr)
	return 0
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer d.fsys.Metrics.lookupTimer().observe()
	if name == ctlName && d.IsRoot() {
		if e := d.fsys.ctlAttr(&out.Attr, syscall.S_IFDIR|0o555); e != 0 {
			return nil, e
		}
		return d.fsys.ctlNode(ctx, &d.Inode), 0
	}
	// A file that this mount writes is locked while it is looked up, so
	// that the entry describes its newest state: the size of the bytes
	// being written, or the commit that just finished, never an older
	// commit read before the writer's last one (the kernel would keep
	// that size and cut reads short).
	locked := d.fileChild(name)
	if locked != nil {
		locked.mu.Lock()
		defer locked.mu.Unlock()
	}
	var fi *store.FileInfo
	var err error
	for range 3 {
		fi, err = d.fsys.s.LookupAttr(d.ino.Load(), name)
		if errors.Is(err, iofs.ErrNotExist) && len(name) == sha256Hex {
			// blocks/<sha256> exists for any blob the store holds that
			// the caller may read, if the caller may create it here.
			fi, err = d.fsys.s.AdoptBlob(d.ino.Load(), name, cred(ctx))
		}
		if err != nil || !fi.Mode.IsRegular() {
			break
		}
		// The version found stays for this thread's open (filelease.go);
		// one replaced already is looked up again. A lease is a help,
		// not a condition: without one, the open of a version gone
		// answers ESTALE and the kernel looks the name up again.
		if _, lerr := d.fsys.fileLeases.take(ctx, d.fsys, fi.Ino); !errors.Is(lerr, iofs.ErrNotExist) {
			if lerr != nil {
				d.fsys.log.Warn("lease a lookup's version", "name", name, "err", lerr)
			}
			break
		}
	}
	if err != nil {
		if len(name) == sha256Hex {
			// blocks/<sha256> appears without a create when another
			// namespace stores the block (adoption, above), and any
			// directory may become blocks by a rename: the kernel
			// must ask again.
			uncachedMiss(out)
		}
		return nil, d.fsys.errno("lookup", err)
	}
	d.blobEntry(fi, out)
	return d.entry(ctx, name, fi, locked, out), 0
}

// lookupFrom answers a lookup of name from fi, its attributes as read
// earlier in the same request (a READDIRPLUS batch, dirHandle), as Lookup
// would answer it now: a file that this mount writes is described under
// its lock, and one committed since fi was read (its node's store inode
// is not fi's) is looked up again.
func (d *dirNode) lookupFrom(ctx context.Context, name string, fi *store.FileInfo, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if fi.Blob != "" || d.inBlocks() {
		// A listing's entry of a block gives the kernel no node: any
		// timeout the kernel takes is at least a jiffy (it rounds 1 ns
		// up), during which a stat right after the listing (ls -l, find,
		// readdir then stat) would be answered from the kernel's cache,
		// a sighting the daemon never hears of (blobsight.go). An entry
		// without a node is listed and not linked
		// (fuse_direntplus_link), so the check looks the name up.
		return nil, syscall.ENOENT
	}
	locked := d.fileChild(name)
	if locked != nil {
		locked.mu.Lock()
		if locked.storeIno() != fi.Ino {
			locked.mu.Unlock()
			return d.Lookup(ctx, name, out)
		}
		defer locked.mu.Unlock()
	}
	return d.entry(ctx, name, fi, locked, out), 0
}

// entry makes the reply to a lookup of name, which the store describes as
// fi: the node, and the attributes of a file being written as its writes
// left them. locked is the file node the kernel knows under name, if any,
// which the caller holds locked.
func (d *dirNode) entry(ctx context.Context, name string, fi *store.FileInfo, locked *fileNode, out *fuse.EntryOut) *gofs.Inode {
	ch := d.child(ctx, name, fi, out)
	if f, ok := ch.Operations().(*fileNode); ok {
		switch {
		case f == locked:
			if f.storeIno() == fi.Ino {
				f.writtenAttr(&out.Attr)
			}
		case locked == nil:
			// The file's node under another name (renamed through the
			// control socket while written here).
			f.mu.Lock()
			if f.storeIno() == fi.Ino {
				f.writtenAttr(&out.Attr)
			}
			f.mu.Unlock()
		}
	}
	return ch
}

// uncachedMiss makes the reply to a lookup that fails one that the kernel
// does not keep as a negative entry, for names that can appear without
// the kernel seeing them created. go-fuse turns an ENOENT into a negative
// entry with the mount's NegativeTimeout only when the node left the
// entry timeout unset; with one set, it sends the error itself, which the
// kernel never caches.
func uncachedMiss(out *fuse.EntryOut) { out.SetEntryTimeout(time.Nanosecond) }

// fileChild returns the file node the kernel knows under name, if any.
func (d *dirNode) fileChild(name string) *fileNode {
	if ch := d.GetChild(name); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok {
			return f
		}
	}
	return nil
}

// dotEntries starts a listing of directory n with "." and "..", as every
// directory's getdents(2) does (ls -a, tools that count them; go-fuse adds
// neither): n's own inode number, and its parent's as the kernel's tree
// holds it (the root's ".." is the root), with room for more entries.
func dotEntries(n *gofs.Inode, more int) []fuse.DirEntry {
	parent := n
	if _, p := n.Parent(); p != nil {
		parent = p
	}
	return append(make([]fuse.DirEntry, 0, 2+more),
		fuse.DirEntry{Name: ".", Ino: n.StableAttr().Ino, Mode: syscall.S_IFDIR},
		fuse.DirEntry{Name: "..", Ino: parent.StableAttr().Ino, Mode: syscall.S_IFDIR})
}

// reserved reports names that the virtual tree takes.
func (d *dirNode) reserved(name string) bool { return name == ctlName && d.IsRoot() }

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.reserved(name) {
		return nil, syscall.EEXIST
	}
	fi, err := d.fsys.s.MkdirAt(d.ino.Load(), name, goMode(mode), owner(ctx))
	if err != nil {
		return nil, d.fsys.errno("mkdir", err)
	}
	return d.child(ctx, name, fi, out), 0
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.fsys.errno("rmdir", d.fsys.s.RemoveAt(d.ino.Load(), name, true))
}

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	d.dropLease(ctx, name)
	return d.fsys.errno("unlink", d.fsys.s.RemoveAt(d.ino.Load(), name, false))
}

// Rename's flags are the platform's (renameflags.go): renameat2(2)'s on
// Linux, renamex_np(2)'s on macOS.
func (d *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	noReplace, e := decodeRename(flags, hostPlatform().rename)
	if e != 0 {
		return e
	}
	np, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	if d.reserved(name) || np.reserved(newName) {
		return syscall.EPERM
	}
	ch := d.GetChild(name)
	np.dropLease(ctx, newName)
	if err := d.fsys.s.RenameAt(d.ino.Load(), name, np.ino.Load(), newName, noReplace); err != nil {
		return d.fsys.errno("rename", err)
	}
	if f, ok := nodeOps(ch).(*fileNode); ok {
		oldDir, _ := d.Parent()
		newDir, _ := np.Parent()
		if store.IndexedOnRename(oldDir, name, newDir, newName) {
			f.reclassify(ctx, newName)
		}
		if np.inBlocks() && !d.inBlocks() {
			// It keeps the entry it had, cached for the mount's
			// timeout, not a block's (blobsight.go): the kernel must
			// ask again. Outside the handler (notify.go).
			go np.fsys.notifyEntry(&np.Inode, newName)
		}
	}
	return 0
}

// dropLease ends ctx's caller's lease of the version the kernel knows
// under name (filelease.go), before that thread unlinks it or renames
// over it: its own lookup of the name, part of that walk, must not keep
// the version as an orphan.
func (d *dirNode) dropLease(ctx context.Context, name string) {
	if f, ok := nodeOps(d.GetChild(name)).(*fileNode); ok {
		d.fsys.fileLeases.drop(ctx, d.fsys, f.storeIno())
	}
}

// nodeOps is ch's node, or nil for none.
func nodeOps(ch *gofs.Inode) gofs.InodeEmbedder {
	if ch == nil {
		return nil
	}
	return ch.Operations()
}

func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if d.reserved(name) {
		return nil, nil, 0, syscall.EEXIST
	}
	fi, err := d.fsys.s.CreateHeldAt(d.ino.Load(), name, goMode(mode), owner(ctx))
	if err != nil {
		return nil, nil, 0, d.fsys.errno("create", err)
	}
	d.blobEntry(fi, out)
	ch := d.child(ctx, name, fi, out)
	f := ch.Operations().(*fileNode)
	// The new inode came back held: the writer's hold (openWriter).
	f.mu.Lock()
	// The kernel links the node under its name only once Create returns;
	// its spool, started now, goes by this name (chunkedWhole).
	dirName, _ := d.Parent()
	f.createdAs = [2]string{dirName, name}
	if f.held == 0 && f.ino.Load() == fi.Ino {
		f.held = fi.Ino
	} else if err := d.fsys.s.Unhold(fi.Ino); err != nil {
		d.fsys.log.Warn("release a created file's hold", "err", err)
	}
	f.mu.Unlock()
	h, e := f.openWriter(ctx, true)
	if e != 0 {
		// The caller gets an error, so no name may stay behind (an
		// empty file nobody asked for, in the way of the retry).
		if err := d.fsys.s.Uncreate(d.ino.Load(), name, fi.Ino); err != nil {
			d.fsys.log.Error("create failed and its name could not be removed", "name", name, "err", err)
		}
		return nil, nil, 0, e
	}
	return ch, h, d.fsys.writeOpenFlags(flags), 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := d.fsys.s.StatFS()
	if err != nil {
		return d.fsys.errno("statfs", err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize, out.NameLen = st.Bsize, st.Bsize, 255
	return 0
}

func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (d *dirNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Fsync of a directory makes every change committed so far durable:
// changes of names are committed without a sync (durable with the next
// sync of anything, as on a local disk; store/journal.go), and an fsync
// of the directory is how a program asks for its entries to be durable.
func (d *dirNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	if err := d.fsys.s.Sync(); err != nil {
		return d.fsys.errno("fsync dir", err)
	}
	return 0
}
