package store

import (
	"errors"
	"io/fs"
	"slices"

	"github.com/kvfs/kvfs/manifest"
)

// Most of kvfs leaves permission checks to the kernel (the mount uses
// default_permissions): it checks the path the caller walks and the mode
// of what the caller opens or changes. A few things reach an inode that the
// caller never walked to: a blob adopted by its hash (AdoptBlob) is the
// content of other files, wherever they are. Those checks are made here,
// with the same rules as the kernel's generic_permission.

// Cred is who makes a request: the caller of a FUSE request. A nil *Cred
// is the daemon itself (put, the control socket), which may do anything.
type Cred struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
}

// Access bits, as access(2) takes them.
const (
	mayExec  = 1
	mayWrite = 2
	mayRead  = 4
)

// may reports whether c may access an inode of mode m owned by uid:gid as
// want (a mask of mayRead, mayWrite, mayExec): root may do anything but
// execute a file no one may execute; anyone else gets the owner's, the
// group's or others' bits, the first class that c belongs to, as POSIX
// says (an owner denied what others may do is denied).
func (c *Cred) may(m fs.FileMode, uid, gid uint32, want uint32) bool {
	if c == nil {
		return true
	}
	perm := uint32(m.Perm())
	if c.UID == 0 {
		return want&mayExec == 0 || m.IsDir() || perm&0o111 != 0
	}
	var bits uint32
	switch {
	case c.UID == uid:
		bits = perm >> 6
	case c.GID == gid || slices.Contains(c.Groups, gid):
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&want == want
}

// CanRead reports whether c may read a file of mode m owned by uid:gid,
// by the rules of may: for a filesystem whose files are not a Store's (a
// pool mount's, whose owners and modes the pool records).
func (c *Cred) CanRead(m fs.FileMode, uid, gid uint32) bool { return c.may(m, uid, gid, mayRead) }

// MayChangeMode reports whether c may clear the set-ID bits of a file
// without being asked to write it: as its owner or root (chmod's rule), or
// as one who may write it (and so could clear them by writing).
func (c *Cred) MayChangeMode(fi *FileInfo) bool {
	return c == nil || c.UID == 0 || c.UID == fi.UID || c.may(fi.Mode, fi.UID, fi.GID, mayWrite)
}

// mayInode is may for inode n.
func (c *Cred) mayInode(n *manifest.Inode, want uint32) bool {
	return c.may(n.Mode, n.UID, n.GID, want)
}

// reaches reports whether c may search every directory from the root down
// to n's parent: whether c could walk to n. An orphan (no parent, not the
// root) is reached by no one but the daemon and root.
func (c *Cred) reaches(tx *manifest.Tx, n *manifest.Inode) bool {
	if c == nil || c.UID == 0 {
		return true
	}
	if n.Ino == manifest.RootIno {
		return true
	}
	for p, depth := n.Parent, 0; ; depth++ {
		if p == 0 || depth > maxDepth {
			return false
		}
		d, err := tx.Inode(p)
		if err != nil || !d.IsDir() || !c.mayInode(d, mayExec) {
			return false
		}
		if p == manifest.RootIno {
			return true
		}
		p = d.Parent
	}
}

// maxDepth bounds the walk up a path, against a cycle in a damaged index.
const maxDepth = 4096

// mayReadInode reports whether c could open n for reading: walk to it and read
// it.
func (c *Cred) mayReadInode(tx *manifest.Tx, n *manifest.Inode) bool {
	return c.mayInode(n, mayRead) && c.reaches(tx, n)
}

// mayAdopt reports whether c may give the blob hash a name in directory
// dir: create there (write and search dir, and reach it), and read one of
// the files that hold the blob where it is, as c could open it. A blob that
// no file holds any more (kept by a manifest's pin or its grace period: an
// engine's collect deleted its name) is read where its last file was
// (BlobRecord.Last), with that file's owner and mode; without that record,
// only the daemon and root may adopt it.
func (c *Cred) mayAdopt(tx *manifest.Tx, dir *manifest.Inode, hash string) bool {
	if c == nil || c.UID == 0 {
		// Root and the daemon adopt for the directory's owner (the entry
		// becomes the owner's: AdoptBlob), so with the owner's rights: a
		// backup tool's stat, run by root in a user's blocks directory,
		// must not hand the user a block of root's.
		if dir.UID == 0 {
			return true
		}
		c = &Cred{UID: dir.UID, GID: dir.GID}
	}
	if !c.mayInode(dir, mayWrite|mayExec) || !c.reaches(tx, dir) {
		return false
	}
	ok := false
	tx.BlobInodes(hash, func(ino uint64) bool {
		n, err := tx.Inode(ino)
		ok = err == nil && c.mayReadInode(tx, n)
		return !ok
	})
	if ok {
		return true
	}
	r, err := tx.BlobRecord(hash)
	if err != nil || r.Last == nil {
		return false
	}
	last := &manifest.Inode{Mode: r.Last.Mode, UID: r.Last.UID, GID: r.Last.GID, Parent: r.Last.Dir}
	return c.mayReadInode(tx, last)
}

// noteBlobHolder records, when blob file n loses its name, where it was
// and whose it was (BlobRecord.Last): once no file holds the blob, this
// says who may adopt it again (mayAdopt).
func noteBlobHolder(tx *manifest.Tx, n *manifest.Inode) error {
	if n.Blob == "" || n.Parent == 0 {
		return nil
	}
	r, err := tx.BlobRecord(n.Blob)
	if errors.Is(err, manifest.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	r.Last = &manifest.BlobHolder{Dir: n.Parent, Mode: n.Mode, UID: n.UID, GID: n.GID}
	return tx.PutBlobRecord(n.Blob, r)
}

// MayRead returns nil if c could open inode ino for reading (walk to it
// and read it), an error wrapping fs.ErrPermission otherwise.
func (s *Store) MayRead(ino uint64, c *Cred) error {
	if c == nil {
		return nil
	}
	return s.db.View(func(tx *manifest.Tx) error {
		n, err := tx.Inode(ino)
		if err != nil {
			return inoErr("access", ino, "", err)
		}
		if !c.mayReadInode(tx, n) {
			return inoErr("access", ino, "", fs.ErrPermission)
		}
		return nil
	})
}

// MayList returns nil if c may list directory ino (read it), MaySearch if
// c may look names up in it (search it): an error wrapping
// fs.ErrPermission otherwise. The views of /.kvfs/whole check these
// themselves, since the kernel checks a view's cached attributes, not the
// original's current ones; like MayOpen, they check ino itself, in
// constant time.
func (s *Store) MayList(ino uint64, c *Cred) error {
	return s.mayDir("list", ino, c, mayRead)
}

// MaySearch: see MayList.
func (s *Store) MaySearch(ino uint64, c *Cred) error {
	return s.mayDir("search", ino, c, mayExec)
}

// MayOpen returns nil if c may read inode ino itself, an error wrapping
// fs.ErrPermission otherwise. Unlike MayRead it does not walk up the
// directories above ino: it is for the views, which the caller reached
// through view directories whose modes the kernel checked on the way
// (and a view directory held open keeps working when a directory above it
// is closed, as a held directory does on a local disk).
func (s *Store) MayOpen(ino uint64, c *Cred) error {
	return s.mayHere("access", ino, c, mayRead)
}

func (s *Store) mayDir(op string, ino uint64, c *Cred, want uint32) error {
	return s.mayHere(op, ino, c, want)
}

// mayHere checks c against inode ino's own owner and mode: constant time,
// however deep ino is.
func (s *Store) mayHere(op string, ino uint64, c *Cred, want uint32) error {
	if c == nil {
		return nil
	}
	return s.db.View(func(tx *manifest.Tx) error {
		n, err := tx.Inode(ino)
		if err != nil {
			return inoErr(op, ino, "", err)
		}
		if !c.mayInode(n, want) {
			return inoErr(op, ino, "", fs.ErrPermission)
		}
		return nil
	})
}
