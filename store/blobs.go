package store

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// Engine blocks (FORMAT.md §4) are blobs: files in a directory named
// "blocks", named by the sha256 of their content. The engine writes a
// snapshot's blocks first and its format-5 manifest last, skips blocks whose
// name already exists, and lets a collect in any process delete blocks that
// no manifest in the directory lists yet. kvfs therefore keeps a blob's
// content in a blob record, apart from its names:
//
//   - a committed format-5 manifest pins every blob it lists; removing a
//     pinned blob's name removes the name only;
//   - a blob that nothing pins stays for a grace period after its last name
//     goes, and a manifest committed meanwhile pins it again;
//   - a blob that a client saw exist stays for a grace period after that
//     sighting, its name too (seen.go): the engine skips a block that
//     exists and commits the manifest that lists it last;
//   - looking up blocks/<sha256> in any blocks directory finds any blob the
//     store holds, and gives it a name there, if the caller may create
//     there and read one of the blob's files (AdoptBlob).
//
// A record with content holds one reference on each of its chunks, like a
// file's manifest does.

// DefaultBlobGrace is how long an unpinned blob outlives its last name.
const DefaultBlobGrace = 10 * time.Minute

// blobStored registers the content of a blob file committed in tx.
func blobStored(tx *manifest.Tx, hash string, m manifest.Manifest) error {
	r, err := tx.BlobRecord(hash)
	if errors.Is(err, manifest.ErrNotFound) {
		r, err = &manifest.BlobRecord{}, nil
	}
	if err != nil {
		return err
	}
	r.Grace = 0
	if !r.HasContent {
		if err := acquire(tx, m.Chunks()); err != nil {
			return err
		}
		if err := tx.PutBlobContent(hash, m); err != nil {
			return err
		}
		r.HasContent = true
	}
	return tx.PutBlobRecord(hash, r)
}

// acquire adds a reference to each chunk, which must exist.
func acquire(tx *manifest.Tx, ids []blockstore.ID) error {
	for _, id := range ids {
		c, err := tx.Chunk(id)
		if err != nil {
			return fmt.Errorf("reference chunk %s: %w", id, err)
		}
		c.Refs++
		if err := tx.PutChunk(id, c); err != nil {
			return err
		}
	}
	return nil
}

// pinBlobs records that inode ino, a committed format-5 manifest, lists
// hashes (distinct).
func pinBlobs(tx *manifest.Tx, ino uint64, hashes []string) error {
	for _, h := range hashes {
		r, err := tx.BlobRecord(h)
		if errors.Is(err, manifest.ErrNotFound) {
			r, err = &manifest.BlobRecord{}, nil
		}
		if err != nil {
			return err
		}
		r.Pins++
		r.Grace = 0
		if err := tx.PutBlobRecord(h, r); err != nil {
			return err
		}
	}
	return tx.PutPins(ino, hashes)
}

// unpinBlobs drops the pins of a released inode.
func (s *Store) unpinBlobs(tx *manifest.Tx, ino uint64) ([]blockstore.Loc, error) {
	var freed []blockstore.Loc
	for _, h := range tx.Pins(ino) {
		r, err := tx.BlobRecord(h)
		if errors.Is(err, manifest.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if r.Pins > 0 {
			r.Pins--
		}
		if err := tx.PutBlobRecord(h, r); err != nil {
			return nil, err
		}
		f, err := s.retire(tx, h, time.Now())
		if err != nil {
			return nil, err
		}
		freed = append(freed, f...)
	}
	return freed, tx.PutPins(ino, nil)
}

// retire looks at a blob that may have lost its last pin or name: it starts
// the grace period, or, once that is over, releases the content.
func (s *Store) retire(tx *manifest.Tx, hash string, now time.Time) ([]blockstore.Loc, error) {
	r, err := tx.BlobRecord(hash)
	if errors.Is(err, manifest.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if r.Pins > 0 {
		return nil, nil
	}
	if _, err := tx.Blob(hash); err == nil {
		return nil, nil // still named somewhere
	}
	if !r.HasContent {
		return nil, tx.DeleteBlobRecord(hash)
	}
	if r.Grace == 0 {
		r.Grace = now.Add(s.blobGrace).UnixNano()
		return nil, tx.PutBlobRecord(hash, r)
	}
	if now.UnixNano() < r.Grace {
		return nil, nil
	}
	if until := s.seenUntil(hash); now.UnixNano() < until {
		// A client saw it exist lately (seen.go): the grace counts
		// from that sighting.
		r.Grace = until
		return nil, tx.PutBlobRecord(hash, r)
	}
	m, err := tx.BlobContent(hash)
	if err != nil {
		return nil, err
	}
	freed, err := tx.Release(m.Chunks())
	if err != nil {
		return nil, err
	}
	return freed, tx.DeleteBlobRecord(hash)
}

// ExpireBlobs releases the content of blobs whose grace period is over.
// The daemon calls it periodically; it returns how many it released.
func (s *Store) ExpireBlobs(now time.Time) (int, error) {
	var due []string
	err := s.db.View(func(tx *manifest.Tx) error {
		return tx.ForEachBlobRecord(func(h string, r *manifest.BlobRecord) error {
			if r.Pins == 0 && r.Grace != 0 && now.UnixNano() >= r.Grace {
				due = append(due, h)
			}
			return nil
		})
	})
	if err != nil || len(due) == 0 {
		return 0, err
	}
	var freed []blockstore.Loc
	n := 0
	err = s.freeing("expire blobs", func(tx *manifest.Tx) error {
		freed, n = nil, 0
		for _, h := range due {
			f, err := s.retire(tx, h, now)
			if err != nil {
				return err
			}
			if _, err := tx.BlobRecord(h); errors.Is(err, manifest.ErrNotFound) {
				n++
			}
			freed = append(freed, f...)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire blobs: %w", err)
	}
	s.punch(freed)
	return n, nil
}

// AdoptBlob gives the blob named name (a sha256) a name in directory
// parent, which must be a "blocks" directory, if the store holds that
// blob's content: the engine's existence check for a block succeeds for a
// block that any namespace wrote, and the block reads back. It fails with
// fs.ErrNotExist otherwise.
//
// A blob that a file of parent holds under another name is not adopted
// there (heldIn): it is being written there, and its name comes with the
// rename.
//
// c is the caller (nil: the daemon itself). Adopting is creating a file
// with another file's content, so c must be allowed both (mayAdopt): to
// create in parent, and to read the blob where it is; otherwise the blob
// does not exist for c, and nothing is created. The new entry is c's, as a
// file c created would be, except when c is root or the daemon: they act
// for the directory's owner (a backup tool's stat, an engine run as root),
// so the entry is the owner's and group's, readable by the user whose
// blocks directory it is.
func (s *Store) AdoptBlob(parent uint64, name string, c *Cred) (*FileInfo, error) {
	if !hex64.MatchString(name) {
		return nil, inoErr("lookup", parent, name, fs.ErrNotExist)
	}
	// Most misses are not blobs: decide that without a write transaction.
	known := false
	s.db.View(func(tx *manifest.Tx) error {
		d, err := tx.Inode(parent)
		if err == nil && d.IsDir() && d.Name == "blocks" {
			r, err := tx.BlobRecord(name)
			known = err == nil && r.HasContent && !heldIn(tx, name, parent) && c.mayAdopt(tx, d, name)
		}
		return nil
	})
	if !known {
		return nil, inoErr("lookup", parent, name, fs.ErrNotExist)
	}
	var fi *FileInfo
	err := s.db.Update(func(tx *manifest.Tx) error {
		d, err := tx.Inode(parent)
		if err != nil {
			return err
		}
		if !d.IsDir() || d.Name != "blocks" {
			return fs.ErrNotExist
		}
		if ino, err := tx.Lookup(parent, name); err == nil {
			n, err := tx.Inode(ino)
			if err != nil {
				return err
			}
			fi = inoInfo(tx, n) // named meanwhile
			return nil
		}
		r, err := tx.BlobRecord(name)
		if errors.Is(err, manifest.ErrNotFound) || err == nil && !r.HasContent {
			return fs.ErrNotExist
		}
		if err != nil {
			return err
		}
		if heldIn(tx, name, parent) || !c.mayAdopt(tx, d, name) {
			return fs.ErrNotExist
		}
		m, err := tx.BlobContent(name)
		if err != nil {
			return err
		}
		if err := acquire(tx, m.Chunks()); err != nil {
			return err
		}
		ino, err := tx.NextIno()
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		uid, gid := d.UID, d.GID
		if c != nil && c.UID != 0 {
			uid, gid = c.UID, c.GID
		}
		n := &manifest.Inode{Ino: ino, Mode: 0o600, Size: m.Size(), Mtime: now, Ctime: now, UID: uid, GID: gid,
			ManifestID: m.ID(), Kind: kindBlob, Blob: name, Parent: parent, Name: name}
		if err := tx.PutInode(n); err != nil {
			return err
		}
		if err := tx.PutManifest(ino, m); err != nil {
			return err
		}
		if err := tx.Link(parent, name, ino); err != nil {
			return err
		}
		if err := tx.AddBlob(name, ino); err != nil {
			return err
		}
		r.Grace = 0
		if err := tx.PutBlobRecord(name, r); err != nil {
			return err
		}
		fi = inoInfo(tx, n)
		return nil
	})
	if err != nil {
		return nil, inoErr("lookup", parent, name, err)
	}
	return fi, nil
}

// heldIn reports whether a file in directory dir holds blob hash: under
// another name than hash, since a lookup of hash failed. That is the
// engine writing the block there: <hash>.tmp, fsynced, about to be renamed
// onto <hash>. The kernel looks the rename's target up first (and mv(1)
// stats it); adopting there would create the name in a synced write
// transaction, at every block written, only for the rename to replace it
// at once. The rename gives the block its name.
func heldIn(tx *manifest.Tx, hash string, dir uint64) bool {
	held := false
	tx.BlobInodes(hash, func(ino uint64) bool {
		n, err := tx.Inode(ino)
		held = err == nil && n.Parent == dir && n.Name != ""
		return !held
	})
	return held
}
