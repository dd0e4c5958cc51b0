package store

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Paths name entries relative to the store's root, with "/" separators;
// a leading "/" is allowed, "." and ".." components are not (a store path
// never escapes the root, and means one thing).

// ReservedName is the name at the root that a mount shows its virtual
// tree under (/.kvfs): no entry of the store may take it, or the mount
// would hide it.
const ReservedName = ".kvfs"

// creatable checks that comps may name a new entry: not the reserved name
// at the root.
func creatable(comps []string) error {
	if len(comps) > 0 && comps[0] == ReservedName {
		return fmt.Errorf("%w: /%s is reserved for the mount's virtual tree", fs.ErrInvalid, ReservedName)
	}
	return nil
}

// modeBits keeps of a mode given at creation the permission bits and the
// set-user-ID, set-group-ID and sticky bits, as asked for (the kernel has
// applied the umask).
func modeBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// MaxNameBytes is the longest name of a directory entry, as Linux's
// NAME_MAX (statfs reports it).
const MaxNameBytes = 255

// ErrNameTooLong is a name of more than MaxNameBytes (ENAMETOOLONG).
var ErrNameTooLong = errors.New("file name too long")

// validName checks one component: ErrNameTooLong past MaxNameBytes,
// fs.ErrInvalid for "", ".", "..", and names holding '/' or NUL. Any other
// byte is allowed: names are bytes.
func validName(name string) error {
	switch {
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrNameTooLong, len(name), MaxNameBytes)
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%w: bad name %q", fs.ErrInvalid, name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: a name cannot hold '/' or NUL: %q", fs.ErrInvalid, name)
	}
	return nil
}

// splitPath returns the components of p; the root has none.
func splitPath(p string) ([]string, error) {
	var out []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "":
			continue
		case ".", "..":
			return nil, fmt.Errorf("%q: %w: '.' and '..' are not allowed in store paths", p, fs.ErrInvalid)
		}
		if err := validName(c); err != nil {
			return nil, fmt.Errorf("%q: %w", p, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// walk resolves components to an inode number, failing with
// fs.ErrNotExist or manifest.ErrNotDir.
func walk(tx *manifest.Tx, comps []string) (uint64, error) {
	ino := manifest.RootIno
	for i, c := range comps {
		if i > 0 {
			n, err := tx.Inode(ino)
			if err != nil {
				return 0, err
			}
			if !n.IsDir() {
				return 0, manifest.ErrNotDir
			}
		}
		next, err := tx.Lookup(ino, c)
		if errors.Is(err, manifest.ErrNotFound) {
			return 0, fs.ErrNotExist
		}
		if err != nil {
			return 0, err
		}
		ino = next
	}
	return ino, nil
}

// walkInode resolves components to their inode.
func walkInode(tx *manifest.Tx, comps []string) (*manifest.Inode, error) {
	ino, err := walk(tx, comps)
	if err != nil {
		return nil, err
	}
	return tx.Inode(ino)
}

// parentOf resolves the directory that holds the last component of comps,
// creating missing directories, owned by *mkdirs, when mkdirs is not nil.
func parentOf(tx *manifest.Tx, comps []string, mkdirs *Owner) (uint64, error) {
	ino := manifest.RootIno
	for _, c := range comps[:len(comps)-1] {
		next, err := tx.Lookup(ino, c)
		if errors.Is(err, manifest.ErrNotFound) && mkdirs != nil {
			n, err := mkdir(tx, ino, c, 0o755, *mkdirs)
			if err != nil {
				return 0, err
			}
			ino = n.Ino
			continue
		}
		if errors.Is(err, manifest.ErrNotFound) {
			return 0, fs.ErrNotExist
		}
		if err != nil {
			return 0, err
		}
		n, err := tx.Inode(next)
		if err != nil {
			return 0, err
		}
		if !n.IsDir() {
			return 0, manifest.ErrNotDir
		}
		ino = next
	}
	return ino, nil
}

// child returns the inode named name in directory parent, or
// fs.ErrNotExist.
func child(tx *manifest.Tx, parent uint64, name string) (*manifest.Inode, error) {
	ino, err := tx.Lookup(parent, name)
	if errors.Is(err, manifest.ErrNotFound) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	return tx.Inode(ino)
}

func mkdir(tx *manifest.Tx, parent uint64, name string, perm fs.FileMode, o Owner) (*manifest.Inode, error) {
	ino, err := tx.NextIno()
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	n := &manifest.Inode{Ino: ino, Mode: fs.ModeDir | modeBits(perm), Mtime: now, Ctime: now, Parent: parent, Name: name,
		UID: o.UID, GID: o.GID}
	if err := tx.PutInode(n); err != nil {
		return nil, err
	}
	return n, tx.Link(parent, name, ino)
}

// FileInfo describes a committed file or a directory.
type FileInfo struct {
	Path string
	Name string
	// Ino is the inode of this committed version; ID the file's identity,
	// its inode number for users, kept across commits (manifest.Inode.ID).
	Ino   uint64
	ID    uint64
	Mode  fs.FileMode
	Size  int64
	Mtime time.Time
	// Kind is how a file's content was chunked ("mlxkv", "blob",
	// "plain"); ManifestID names its committed content.
	Kind       string
	ManifestID string
	// Set by the inode-level API only.
	Ctime    time.Time
	Atime    time.Time
	UID, GID uint32
	Parent   uint64
	Blob     string // sha256 of a blob's content
}

// IsDir reports whether the entry is a directory.
func (fi *FileInfo) IsDir() bool { return fi.Mode.IsDir() }

func info(path, name string, n *manifest.Inode) *FileInfo {
	return &FileInfo{Path: path, Name: name, Ino: n.Ino, ID: n.ID(), Mode: n.Mode, Size: n.Size,
		Mtime: time.Unix(0, n.Mtime), Kind: n.Kind, ManifestID: n.ManifestID}
}

func pathErr(op, path string, err error) error {
	switch {
	case errors.Is(err, manifest.ErrNotDir):
		err = fmt.Errorf("%w (a path component is a file)", err)
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// Stat describes the entry at path.
func (s *Store) Stat(path string) (*FileInfo, error) {
	comps, err := splitPath(path)
	if err != nil {
		return nil, pathErr("stat", path, err)
	}
	var fi *FileInfo
	err = s.db.View(func(tx *manifest.Tx) error {
		n, err := walkInode(tx, comps)
		if err != nil {
			return err
		}
		name := "/"
		if len(comps) > 0 {
			name = comps[len(comps)-1]
		}
		fi = info(path, name, n)
		return nil
	})
	if err != nil {
		return nil, pathErr("stat", path, err)
	}
	return fi, nil
}

// List returns the entries of the directory at path, in name order.
func (s *Store) List(path string) ([]*FileInfo, error) {
	comps, err := splitPath(path)
	if err != nil {
		return nil, pathErr("list", path, err)
	}
	var out []*FileInfo
	err = s.db.View(func(tx *manifest.Tx) error {
		n, err := walkInode(tx, comps)
		if err != nil {
			return err
		}
		if !n.IsDir() {
			return manifest.ErrNotDir
		}
		ents, err := tx.ReadDir(n.Ino)
		if err != nil {
			return err
		}
		for _, e := range ents {
			c, err := tx.Inode(e.Ino)
			if err != nil {
				return err
			}
			out = append(out, info(strings.TrimSuffix(path, "/")+"/"+e.Name, e.Name, c))
		}
		return nil
	})
	if err != nil {
		return nil, pathErr("list", path, err)
	}
	return out, nil
}

// Mkdir creates a directory, and its missing parents when parents is set,
// owned by the store's owner.
func (s *Store) Mkdir(path string, perm fs.FileMode, parents bool) error {
	comps, err := splitPath(path)
	if err == nil && len(comps) == 0 {
		err = fs.ErrExist
	}
	if err == nil {
		err = creatable(comps)
	}
	if err != nil {
		return pathErr("mkdir", path, err)
	}
	err = s.db.Update(func(tx *manifest.Tx) error {
		var mkdirs *Owner
		if parents {
			mkdirs = &s.owner
		}
		parent, err := parentOf(tx, comps, mkdirs)
		if err != nil {
			return err
		}
		name := comps[len(comps)-1]
		if ino, err := tx.Lookup(parent, name); err == nil {
			if n, err := tx.Inode(ino); err == nil && n.IsDir() && parents {
				return nil
			}
			return fs.ErrExist
		}
		_, err = mkdir(tx, parent, name, perm, s.owner)
		return err
	})
	if err != nil {
		return pathErr("mkdir", path, err)
	}
	return nil
}

// Remove removes a file, or an empty directory. A file that is open keeps
// its content until its last handle closes.
func (s *Store) Remove(path string) error {
	comps, err := splitPath(path)
	if err == nil && len(comps) == 0 {
		err = fmt.Errorf("%w: cannot remove the root", fs.ErrInvalid)
	}
	if err != nil {
		return pathErr("remove", path, err)
	}
	var freed []blockstore.Loc
	err = s.freeing("remove", func(tx *manifest.Tx) error {
		parent, err := parentOf(tx, comps, nil)
		if err != nil {
			return err
		}
		freed, err = s.removeTx(tx, parent, comps[len(comps)-1], removeAny)
		return err
	})
	if err != nil {
		return pathErr("remove", path, err)
	}
	s.punch(freed)
	return nil
}

// What removeTx may remove.
const (
	removeAny  = iota
	removeFile // unlink: not a directory
	removeDir  // rmdir: only a directory
)

// removeTx removes name from directory parent: a file (released, or kept
// as an orphan while open) or an empty directory.
func (s *Store) removeTx(tx *manifest.Tx, parent uint64, name string, what int) ([]blockstore.Loc, error) {
	if len(name) > MaxNameBytes {
		return nil, validName(name)
	}
	n, err := child(tx, parent, name)
	if err != nil {
		return nil, err
	}
	ino := n.Ino
	switch {
	case n.IsDir() && what == removeFile:
		return nil, manifest.ErrIsDir
	case !n.IsDir() && what == removeDir:
		return nil, manifest.ErrNotDir
	case n.IsDir() && !tx.Empty(ino):
		return nil, manifest.ErrNotEmpty
	}
	if err := tx.Unlink(parent, name); err != nil {
		return nil, err
	}
	if err := touchDir(tx, parent); err != nil {
		return nil, err
	}
	return s.dropInode(tx, n)
}

// touchDir sets a directory's modification time to now.
func touchDir(tx *manifest.Tx, dir uint64) error {
	d, err := tx.Inode(dir)
	if err != nil {
		return err
	}
	d.Atime = d.AccessTime() // keep it as it was (see manifest.Inode.Atime)
	d.Mtime = time.Now().UnixNano()
	d.Ctime = d.Mtime
	return tx.PutInode(d)
}

// dropInode handles an inode that lost its only name: released now, or
// kept as an orphan while it is open.
func (s *Store) dropInode(tx *manifest.Tx, n *manifest.Inode) ([]blockstore.Loc, error) {
	if err := noteBlobHolder(tx, n); err != nil {
		return nil, err
	}
	s.mu.Lock()
	open := s.open[n.Ino] > 0
	s.mu.Unlock()
	if open {
		if err := tx.Unindex(n); err != nil {
			return nil, err
		}
		n.Parent, n.Name = 0, ""
		n.Ctime = time.Now().UnixNano() // its link count went to 0
		if err := tx.PutInode(n); err != nil {
			return nil, err
		}
		if err := tx.AddOrphan(n.Ino); err != nil {
			return nil, err
		}
		if n.Blob != "" {
			return s.retire(tx, n.Blob, time.Now())
		}
		return nil, nil
	}
	return s.releaseInode(tx, n)
}

// Rename moves oldpath to newpath atomically, replacing a file (or an empty
// directory, when moving a directory) at newpath. The replaced file's
// chunks are released when its last open handle closes.
func (s *Store) Rename(oldpath, newpath string) error {
	oc, err := splitPath(oldpath)
	if err != nil {
		return pathErr("rename", oldpath, err)
	}
	nc, err := splitPath(newpath)
	if err == nil {
		err = creatable(nc)
	}
	if err != nil {
		return pathErr("rename", newpath, err)
	}
	if len(oc) == 0 || len(nc) == 0 {
		return pathErr("rename", oldpath, fmt.Errorf("%w: cannot rename the root", fs.ErrInvalid))
	}
	var freed []blockstore.Loc
	errPath := oldpath
	err = s.freeing("rename", func(tx *manifest.Tx) error {
		op, err := parentOf(tx, oc, nil)
		if err != nil {
			return err
		}
		if _, err := tx.Lookup(op, oc[len(oc)-1]); errors.Is(err, manifest.ErrNotFound) {
			return fs.ErrNotExist
		}
		errPath = newpath
		np, err := parentOf(tx, nc, nil)
		if err != nil {
			return err
		}
		freed, err = s.renameTx(tx, op, oc[len(oc)-1], np, nc[len(nc)-1], false)
		return err
	})
	if err != nil {
		return pathErr("rename", errPath, err)
	}
	s.punch(freed)
	return nil
}

// renameTx moves (op, oname) to (np, nname), replacing what is there
// unless noReplace.
func (s *Store) renameTx(tx *manifest.Tx, op uint64, oname string, np uint64, nname string, noReplace bool) ([]blockstore.Loc, error) {
	if len(oname) > MaxNameBytes {
		return nil, validName(oname)
	}
	if err := validName(nname); err != nil {
		return nil, err
	}
	if np == manifest.RootIno {
		if err := creatable([]string{nname}); err != nil {
			return nil, err
		}
	}
	src, err := child(tx, op, oname)
	if err != nil {
		return nil, err
	}
	ino := src.Ino
	dir, err := tx.Inode(np)
	if err != nil {
		return nil, err
	}
	if !dir.IsDir() {
		return nil, manifest.ErrNotDir
	}
	if src.IsDir() {
		// A directory cannot move into its own subtree.
		for d := np; d != manifest.RootIno; {
			if d == ino {
				return nil, fmt.Errorf("%w: cannot move a directory into itself", fs.ErrInvalid)
			}
			dn, err := tx.Inode(d)
			if err != nil {
				return nil, err
			}
			d = dn.Parent
		}
	}
	if err := s.checkBlobName(tx, src, dir, nname); err != nil {
		return nil, err
	}
	if src.IsDir() && nname == "blocks" && src.Name != "blocks" && !tx.Empty(ino) {
		// Its files were not written in a blocks directory: not hashed,
		// not blobs, so a manifest that lists them would not keep them
		// (blobs.go), and eviction would take a block an engine found
		// existing. EXDEV makes mv(1) copy them in, as blocks.
		return nil, fmt.Errorf("rename a directory with files onto the name blocks: %w", syscall.EXDEV)
	}
	var freed []blockstore.Loc
	if old, err := tx.Lookup(np, nname); err == nil {
		if old == ino {
			return nil, nil
		}
		if noReplace {
			return nil, fs.ErrExist
		}
		dst, err := tx.Inode(old)
		if err != nil {
			return nil, err
		}
		switch {
		case dst.IsDir() && !src.IsDir():
			return nil, manifest.ErrIsDir
		case !dst.IsDir() && src.IsDir():
			return nil, manifest.ErrNotDir
		case dst.IsDir() && !tx.Empty(old):
			return nil, manifest.ErrNotEmpty
		}
		if freed, err = s.dropInode(tx, dst); err != nil {
			return nil, err
		}
	}
	if err := tx.Unlink(op, oname); err != nil {
		return nil, err
	}
	if err := tx.Link(np, nname, ino); err != nil {
		return nil, err
	}
	if src.Blob == "" && dir.Name == "blocks" && nname == emptySum && src.Size == 0 && src.Mode.IsRegular() {
		// A file never written, named as the empty blob (checkBlobName):
		// it is that blob, found from any blocks directory as a
		// committed one is.
		m, err := tx.Manifest(ino)
		if err != nil {
			return nil, err
		}
		src.Blob, src.Kind = emptySum, kindBlob
		if err := tx.AddBlob(emptySum, ino); err != nil {
			return nil, err
		}
		if err := blobStored(tx, emptySum, m); err != nil {
			return nil, err
		}
	}
	src.Parent, src.Name = np, nname
	src.Ctime = time.Now().UnixNano()
	if err := tx.PutInode(src); err != nil {
		return nil, err
	}
	if err := touchDir(tx, op); err != nil {
		return nil, err
	}
	if np != op {
		if err := touchDir(tx, np); err != nil {
			return nil, err
		}
	}
	return freed, nil
}

// emptySum is the sha256 of no bytes.
const emptySum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// checkBlobName enforces that a file named by a sha256 in a blocks
// directory has that content: a rename into such a name (the engine writes
// blocks/<h>.tmp and renames it to blocks/<h>) fails otherwise.
func (s *Store) checkBlobName(tx *manifest.Tx, src *manifest.Inode, dir *manifest.Inode, name string) error {
	if src.IsDir() || dir.Name != "blocks" || !hex64.MatchString(name) {
		return nil
	}
	if src.Blob == "" && src.Size == 0 && src.Mode.IsRegular() {
		// Never written (a file created, synced and closed empty is
		// committed at its creation, unhashed): its content is no bytes.
		if name != emptySum {
			return fmt.Errorf("%w: sha256 is %s", ErrBlobMismatch, emptySum)
		}
		return nil
	}
	if src.Blob == "" {
		return fmt.Errorf("%w: the content of %q was not hashed (it was not written in a blocks directory)", ErrBlobMismatch, src.Name)
	}
	if src.Blob != name {
		return fmt.Errorf("%w: sha256 is %s", ErrBlobMismatch, src.Blob)
	}
	return nil
}
