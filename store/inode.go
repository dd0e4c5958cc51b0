package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// The inode-level API serves the filesystem layer, which knows entries by
// inode number and name rather than by path. Errors are the same sentinels
// as the path API's (fs.ErrNotExist, fs.ErrExist, manifest.ErrNotDir, …),
// wrapped with the operation and the entry.

func inoErr(op string, parent uint64, name string, err error) error {
	if name == "" {
		return fmt.Errorf("%s inode %d: %w", op, parent, err)
	}
	return fmt.Errorf("%s %q in inode %d: %w", op, name, parent, err)
}

// inoPath rebuilds an inode's path from its Parent and Name links, for
// display.
func inoPath(tx *manifest.Tx, n *manifest.Inode) string {
	return strings.Join(inoComps(tx, n), "/")
}

// inoComps returns the names on the way from the root to an inode, as
// stored (bytes, not text).
func inoComps(tx *manifest.Tx, n *manifest.Inode) []string {
	var parts []string
	for i := 0; n != nil && n.Ino != manifest.RootIno && i < 4096; i++ {
		parts = append(parts, n.Name)
		p, err := tx.Inode(n.Parent)
		if err != nil {
			break
		}
		n = p
	}
	slices.Reverse(parts)
	return parts
}

// viewInode and updateInode run fn in a transaction and describe the
// inode it returns; errors are wrapped with op and the entry.
func (s *Store) viewInode(op string, parent uint64, name string, fn func(tx *manifest.Tx) (*manifest.Inode, error)) (*FileInfo, error) {
	return s.inodeTx(s.db.View, inoInfo, op, parent, name, fn)
}

func (s *Store) updateInode(op string, parent uint64, name string, fn func(tx *manifest.Tx) (*manifest.Inode, error)) (*FileInfo, error) {
	return s.inodeTx(s.db.Update, inoInfo, op, parent, name, fn)
}

// viewAttr is viewInode without the path (inoAttr).
func (s *Store) viewAttr(op string, parent uint64, name string, fn func(tx *manifest.Tx) (*manifest.Inode, error)) (*FileInfo, error) {
	return s.inodeTx(s.db.View, func(_ *manifest.Tx, n *manifest.Inode) *FileInfo { return inoAttr(n) }, op, parent, name, fn)
}

func (s *Store) inodeTx(run func(func(*manifest.Tx) error) error, describe func(*manifest.Tx, *manifest.Inode) *FileInfo,
	op string, parent uint64, name string, fn func(tx *manifest.Tx) (*manifest.Inode, error)) (*FileInfo, error) {
	var fi *FileInfo
	err := run(func(tx *manifest.Tx) error {
		n, err := fn(tx)
		if errors.Is(err, manifest.ErrNotFound) {
			err = fs.ErrNotExist
		}
		if err != nil {
			return err
		}
		fi = describe(tx, n)
		return nil
	})
	if err != nil {
		return nil, inoErr(op, parent, name, err)
	}
	return fi, nil
}

// inoInfo describes inode n with its path.
func inoInfo(tx *manifest.Tx, n *manifest.Inode) *FileInfo {
	fi := inoAttr(n)
	fi.Path = inoPath(tx, n)
	return fi
}

// inoAttr describes inode n without its path, which costs a read of every
// directory up to the root: the filesystem's lookups and getattrs, one or
// two of which come before nearly every operation, need none.
func inoAttr(n *manifest.Inode) *FileInfo {
	fi := info("", n.Name, n)
	fi.Ctime, fi.Atime, fi.UID, fi.GID = time.Unix(0, n.Ctime), time.Unix(0, n.AccessTime()), n.UID, n.GID
	fi.Parent, fi.Blob = n.Parent, n.Blob
	return fi
}

// StatIno describes an inode, without its Path (see inoAttr).
func (s *Store) StatIno(ino uint64) (*FileInfo, error) {
	return s.viewAttr("stat", ino, "", func(tx *manifest.Tx) (*manifest.Inode, error) { return tx.Inode(ino) })
}

// Lookup describes the entry name in directory parent.
func (s *Store) Lookup(parent uint64, name string) (*FileInfo, error) {
	return s.viewInode("lookup", parent, name, lookupFn(parent, name))
}

// LookupAttr is Lookup without the entry's Path (see inoAttr).
func (s *Store) LookupAttr(parent uint64, name string) (*FileInfo, error) {
	return s.viewAttr("lookup", parent, name, lookupFn(parent, name))
}

// lookupFn finds the inode of name in directory parent.
func lookupFn(parent uint64, name string) func(tx *manifest.Tx) (*manifest.Inode, error) {
	return func(tx *manifest.Tx) (*manifest.Inode, error) {
		if len(name) > MaxNameBytes {
			return nil, validName(name)
		}
		ino, err := tx.Lookup(parent, name)
		if err != nil {
			return nil, err
		}
		return tx.Inode(ino)
	}
}

// ReadDir lists directory ino in name order.
func (s *Store) ReadDir(ino uint64) ([]*FileInfo, error) {
	var out []*FileInfo
	err := s.db.View(func(tx *manifest.Tx) error {
		if _, err := dirInode(tx, ino); err != nil {
			return err
		}
		ents, err := tx.ReadDir(ino)
		if err != nil {
			return err
		}
		for _, e := range ents {
			n, err := tx.Inode(e.Ino)
			if err != nil {
				return err
			}
			out = append(out, &FileInfo{Name: e.Name, Ino: n.Ino, ID: n.ID(), Mode: n.Mode, Size: n.Size, Mtime: time.Unix(0, n.Mtime)})
		}
		return nil
	})
	if err != nil {
		return nil, inoErr("readdir", ino, "", err)
	}
	return out, nil
}

// Owner is who creates an entry.
type Owner struct{ UID, GID uint32 }

// MkdirAt creates directory name in parent.
func (s *Store) MkdirAt(parent uint64, name string, perm fs.FileMode, o Owner) (*FileInfo, error) {
	return s.updateInode("mkdir", parent, name, func(tx *manifest.Tx) (*manifest.Inode, error) {
		if err := checkName(tx, parent, name); err != nil {
			return nil, err
		}
		n, err := mkdir(tx, parent, name, perm, o)
		if err != nil {
			return nil, err
		}
		return n, touchDir(tx, parent)
	})
}

// dirInode returns inode ino, which must be a directory: fs.ErrNotExist
// or manifest.ErrNotDir otherwise.
func dirInode(tx *manifest.Tx, ino uint64) (*manifest.Inode, error) {
	d, err := tx.Inode(ino)
	if errors.Is(err, manifest.ErrNotFound) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	if !d.IsDir() {
		return nil, manifest.ErrNotDir
	}
	return d, nil
}

// checkName checks that parent is a directory without an entry name.
func checkName(tx *manifest.Tx, parent uint64, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if parent == manifest.RootIno {
		if err := creatable([]string{name}); err != nil {
			return err
		}
	}
	if _, err := dirInode(tx, parent); err != nil {
		return err
	}
	if _, err := tx.Lookup(parent, name); err == nil {
		return fs.ErrExist
	}
	return nil
}

// CreateAt creates an empty file name in parent: the name is visible at
// once, and CommitIno gives it content.
func (s *Store) CreateAt(parent uint64, name string, perm fs.FileMode, o Owner) (*FileInfo, error) {
	return s.updateInode("create", parent, name, func(tx *manifest.Tx) (*manifest.Inode, error) {
		if err := checkName(tx, parent, name); err != nil {
			return nil, err
		}
		ino, err := tx.NextIno()
		if err != nil {
			return nil, err
		}
		now := time.Now().UnixNano()
		var empty manifest.Manifest
		n := &manifest.Inode{Ino: ino, Mode: modeBits(perm), Mtime: now, Ctime: now, UID: o.UID, GID: o.GID,
			Parent: parent, Name: name, ManifestID: empty.ID(), Kind: kindPlain}
		if err := tx.PutInode(n); err != nil {
			return nil, err
		}
		if err := tx.PutManifest(ino, empty); err != nil {
			return nil, err
		}
		if err := tx.Link(parent, name, ino); err != nil {
			return nil, err
		}
		return n, touchDir(tx, parent)
	})
}

// CreateHeldAt is CreateAt for a file about to be opened for writing: the
// new inode comes back held (as Hold; release with Unhold), so that the
// evictor cannot take the empty, closed file between its creation and
// its open (the open then failed with ESTALE: TestGCStress). The pin lock's
// read side is held across the create and the pin, so no release runs
// between them (see Store.pins).
func (s *Store) CreateHeldAt(parent uint64, name string, perm fs.FileMode, o Owner) (*FileInfo, error) {
	s.pins.RLock()
	defer s.pins.RUnlock()
	fi, err := s.CreateAt(parent, name, perm, o)
	if err != nil {
		return nil, err
	}
	s.pin(fi.Ino)
	return fi, nil
}

// RemoveAt removes name from parent: with dir, only an empty directory
// (rmdir); without, only a file (unlink).
func (s *Store) RemoveAt(parent uint64, name string, dir bool) error {
	what := removeFile
	if dir {
		what = removeDir
	}
	var freed []blockstore.Loc
	err := s.freeing("remove", func(tx *manifest.Tx) error {
		var err error
		freed, err = s.removeTx(tx, parent, name, what)
		return err
	})
	if err != nil {
		return inoErr("remove", parent, name, err)
	}
	s.punch(freed)
	return nil
}

// RenameAt moves (op, oname) to (np, nname), replacing a file or an empty
// directory there unless noReplace (then fs.ErrExist).
func (s *Store) RenameAt(op uint64, oname string, np uint64, nname string, noReplace bool) error {
	var freed []blockstore.Loc
	err := s.freeing("rename", func(tx *manifest.Tx) error {
		var err error
		freed, err = s.renameTx(tx, op, oname, np, nname, noReplace)
		return err
	})
	if err != nil {
		return inoErr("rename", op, oname, err)
	}
	s.punch(freed)
	return nil
}

// AttrChange is a change of attributes; nil fields stay. There is no
// Ctime: the status change time is the time of the change, always.
type AttrChange struct {
	Mode         *fs.FileMode // permission bits
	UID, GID     *uint32
	Mtime, Atime *time.Time
}

// SetAttr changes an inode's attributes.
func (s *Store) SetAttr(ino uint64, c AttrChange) (*FileInfo, error) {
	return s.updateInode("setattr", ino, "", func(tx *manifest.Tx) (*manifest.Inode, error) {
		n, err := tx.Inode(ino)
		if err != nil {
			return nil, err
		}
		if c.Mode != nil {
			n.Mode = n.Mode.Type() | c.Mode.Perm() | (*c.Mode & (fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
		}
		if c.UID != nil {
			n.UID = *c.UID
		}
		if c.GID != nil {
			n.GID = *c.GID
		}
		// A record without an atime shows the mtime as its atime: it is
		// written out before either changes, so that setting one leaves
		// the other as it was.
		n.Atime = n.AccessTime()
		if c.Mtime != nil {
			n.Mtime = c.Mtime.UnixNano()
		}
		if c.Atime != nil {
			n.Atime = c.Atime.UnixNano()
			// The engine touches a snapshot it restores: a use, for
			// retention (recency.go).
			s.noteUse(ino)
		}
		n.Ctime = time.Now().UnixNano()
		return n, tx.PutInode(n)
	})
}

// Xattr errors.
var (
	ErrNoAttr   = errors.New("no such attribute")
	ErrReadOnly = errors.New("attribute is read-only")
	// ErrXattrTooBig is a value over MaxXattrValue (E2BIG).
	ErrXattrTooBig = errors.New("attribute value too large")
	// ErrXattrNoSpace is a set past the per-file limits (ENOSPC).
	ErrXattrNoSpace = errors.New("no room for the attribute on this file")
)

// Limits on a file's extended attributes, like ext4's (docs/MOUNT.md).
// Linux refuses values over XATTR_SIZE_MAX (64 KiB) itself; the store
// checks again for callers other than the kernel. A file's names, each
// with its NUL, must fit in XATTR_LIST_MAX (64 KiB) with room for the
// computed user.kvfs.* names, or listxattr(2) could never return them
// (E2BIG whatever the buffer). Names and values together are bounded so
// that one file cannot grow the index without limit.
const (
	MaxXattrValue = 64 << 10
	MaxXattrNames = 60 << 10  // sum of len(name)+1
	MaxXattrBytes = 256 << 10 // sum of len(name)+1+len(value)
)

// xattrs returns the attributes of inode n: those of the xattr bucket,
// and the inline ones of a legacy record (the bucket's win).
func xattrs(tx *manifest.Tx, n *manifest.Inode) map[string]int {
	out := map[string]int{}
	for k, v := range n.Xattrs {
		out[k] = len(v)
	}
	for _, e := range tx.Xattrs(n.Ino) {
		out[e.Name] = e.Size
	}
	return out
}

// Xattr returns a user extended attribute.
func (s *Store) Xattr(ino uint64, name string) ([]byte, error) {
	var v []byte
	err := s.db.View(func(tx *manifest.Tx) error {
		var err error
		if v, err = tx.Xattr(ino, name); err == nil || !errors.Is(err, manifest.ErrNotFound) {
			return err
		}
		n, err := tx.Inode(ino)
		if err != nil {
			return err
		}
		b, ok := n.Xattrs[name]
		if !ok {
			return ErrNoAttr
		}
		v = b
		return nil
	})
	return v, err
}

// Xattrs lists an inode's extended attribute names.
func (s *Store) Xattrs(ino uint64) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *manifest.Tx) error {
		n, err := tx.Inode(ino)
		if err != nil {
			return err
		}
		for k := range xattrs(tx, n) {
			out = append(out, k)
		}
		slices.Sort(out)
		return nil
	})
	return out, err
}

// Xattr flags, as setxattr(2).
const (
	XattrCreate  = 1 // fail if the attribute exists
	XattrReplace = 2 // fail if it does not
)

// SetXattr sets (value != nil) or removes (value == nil) a user extended
// attribute. It writes the one attribute and the inode's ctime; a legacy
// record's inline attributes move to the xattr bucket first.
func (s *Store) SetXattr(ino uint64, name string, value []byte, flags int) error {
	if len(value) > MaxXattrValue {
		return fmt.Errorf("setxattr %q of inode %d: %w: %d bytes (at most %d)", name, ino, ErrXattrTooBig, len(value), MaxXattrValue)
	}
	return s.db.Update(func(tx *manifest.Tx) error {
		n, err := tx.Inode(ino)
		if err != nil {
			return err
		}
		if err := tx.MigrateXattrs(n); err != nil {
			return err
		}
		all := xattrs(tx, n)
		_, exists := all[name]
		switch {
		case value == nil && !exists, flags&XattrReplace != 0 && !exists:
			return ErrNoAttr
		case flags&XattrCreate != 0 && exists:
			return fs.ErrExist
		}
		if value == nil {
			if err := tx.DeleteXattr(ino, name); err != nil {
				return err
			}
		} else {
			delete(all, name)
			names, total := len(name)+1, len(name)+1+len(value)
			for k, size := range all {
				names += len(k) + 1
				total += len(k) + 1 + size
			}
			if names > MaxXattrNames || total > MaxXattrBytes {
				return fmt.Errorf("setxattr %q of inode %d: %w: names %d bytes (at most %d), names and values %d bytes (at most %d)",
					name, ino, ErrXattrNoSpace, names, MaxXattrNames, total, MaxXattrBytes)
			}
			if err := tx.PutXattr(ino, name, value); err != nil {
				return err
			}
		}
		n.Ctime = time.Now().UnixNano()
		return tx.PutInode(n)
	})
}

// CommitIno ingests size bytes of src as the new content of the file whose
// current inode is ino, under that inode's name, keeping its attributes.
// The content gets a new inode (the old one is released, or kept while
// open), which is returned. If the file lost its name meanwhile, the
// content is not stored and the error satisfies fs.ErrNotExist; any other
// failure to find the name is an error (see ingest.destination). See
// CommitOptions.Adopt.
func (s *Store) CommitIno(ctx context.Context, ino uint64, src io.ReaderAt, size int64, opts CommitOptions) (*FileInfo, *PutStats, error) {
	return s.commitIno(ctx, ino, src, size, opts, nil)
}

// commitIno is CommitIno with the sums of pieces of src that its writer
// computed (Changes.Pieces).
func (s *Store) commitIno(ctx context.Context, ino uint64, src io.ReaderAt, size int64, opts CommitOptions, pieces []Piece) (*FileInfo, *PutStats, error) {
	// The path only chooses how to chunk (a .mlxkv name, a blocks
	// directory); the commit goes to the inode's own name.
	var comps []string
	err := s.db.View(func(tx *manifest.Tx) error {
		n, err := commitTarget(tx, ino)
		if err == nil {
			comps = inoComps(tx, n)
		}
		return err
	})
	if err != nil {
		return nil, nil, inoErr("commit", ino, "", err)
	}
	in := &ingest{s: s, src: src, size: size, comps: comps, target: ino,
		opts: PutOptions{Mtime: opts.Mtime}, ctime: opts.Ctime, states: map[blockstore.ID]*chunkState{}}
	if f, ok := src.(*os.File); ok && opts.Adopt {
		in.adopt = f
	}
	in.hold = opts.Hold
	in.useKnown(pieces)
	in.movePins(ino, opts)
	fi, err := in.run(ctx)
	in.finish(err)
	if err != nil {
		return nil, nil, inoErr("commit", ino, "", err)
	}
	return fi, &in.stats, nil
}

// FSStats is what statfs reports.
type FSStats struct {
	Blocks, Bfree, Bavail uint64 // in units of Bsize
	Files, Ffree          uint64
	Bsize                 uint32
}

// freeInodes is the count of inodes statfs reports free: the store has no
// inode table to run out of (inode numbers are 64-bit), so a large
// constant, which tools such as df -i show as the capacity left.
const freeInodes = 1 << 32

// StatFS reports the space of the filesystem holding the store, and its
// inodes: Files in all (the store's, used, plus freeInodes) and Ffree free,
// so that used = Files - Ffree is the store's count.
func (s *Store) StatFS() (*FSStats, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.dir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", s.dir, err)
	}
	out := &FSStats{Blocks: st.Blocks, Bfree: st.Bfree, Bavail: st.Bavail, Bsize: uint32(st.Bsize), Ffree: freeInodes}
	var used uint64
	s.db.View(func(tx *manifest.Tx) error {
		return tx.ForEachInode(func(*manifest.Inode) error { used++; return nil })
	})
	out.Files = used + freeInodes
	return out, nil
}

// commitTarget is the inode a commit of ino goes to: one that still has a
// name (fs.ErrNotExist otherwise: the file was removed meanwhile).
func commitTarget(tx *manifest.Tx, ino uint64) (*manifest.Inode, error) {
	n, err := tx.Inode(ino)
	if errors.Is(err, manifest.ErrNotFound) || err == nil && n.Name == "" {
		return nil, fs.ErrNotExist
	}
	return n, err
}

// useKnown takes the sums of pieces the writer computed (Changes.Pieces):
// a chunk of the plan at a piece's offset and of its length is not hashed
// again, and a content cut that lands on a piece's start takes its end.
func (in *ingest) useKnown(pieces []Piece) {
	for _, p := range pieces {
		if p.Summed {
			if in.known == nil {
				in.known = make(map[int64]knownSum, len(pieces))
			}
			in.known[p.Off] = knownSum{n: p.N, sum: p.Sum, cut: p.Cut}
		}
	}
}
