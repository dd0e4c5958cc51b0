package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// ErrBlobMismatch: a file named by a sha256 in a blocks directory does not
// have that sha256.
var ErrBlobMismatch = errors.New("content does not match the blob name")

// PutOptions are the attributes of a file being committed.
type PutOptions struct {
	Mode  fs.FileMode // permissions; 0 means 0644
	Mtime time.Time   // zero means now
	// Owner owns a new file and the parent directories that the put
	// creates; nil means the store's owner (a put has no calling user).
	Owner *Owner
	// Progress, if set, is called with the bytes processed so far.
	Progress func(done, total int64)
}

// PutStats says what an ingest stored.
type PutStats struct {
	Kind         string // "mlxkv", "llama", "blob" or "plain"
	Note         string // why a .mlxkv was stored as plain
	Chunks       int    // chunk extents in the manifest
	NewChunks    int    // chunks appended to packs
	NewBytes     int64  // bytes appended to packs
	ReusedBytes  int64  // bytes of chunks already stored
	Adopted      bool   // the source file became a pack as it is
	ZeroBytes    int64  // bytes stored as zero runs
	ParentReused int64  // bytes matched against the parent snapshot's chunks
	Parent       uint64 // the parent snapshot's inode, 0 if none
	// HashedBytes are the bytes the ingest read and hashed: all of them
	// for a Put, only the changed chunks not hashed while they were
	// written for CommitChanges.
	HashedBytes int64
	// Changes: the commit reused the previous version's unchanged chunks
	// (CommitChanges), rather than chunking the whole content.
	Changes bool
}

// PutFile ingests the local file src as path.
func (s *Store) PutFile(ctx context.Context, src, path string, opts PutOptions) (*FileInfo, *PutStats, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, &fs.PathError{Op: "put", Path: src, Err: errors.New("not a regular file")}
	}
	if opts.Mode == 0 {
		opts.Mode = fi.Mode().Perm()
	}
	if opts.Mtime.IsZero() {
		opts.Mtime = fi.ModTime()
	}
	return s.Put(ctx, f, fi.Size(), path, opts)
}

// chunkRef is one chunk of the source, in file order.
type chunkRef struct {
	off, n int64
	id     blockstore.ID
	zero   bool
	parent bool // matched a parent chunk
}

// chunkState tracks a distinct chunk of an ingest.
type chunkState struct {
	off     int64 // where the source holds its bytes
	written bool  // appended by this ingest
	loc     blockstore.Loc
}

// Put ingests size bytes of src as the file at path, creating missing
// parent directories and replacing an existing file. It reads src once
// (again only for chunks that a concurrent release freed before the
// commit), and commits in one transaction.
func (s *Store) Put(ctx context.Context, src io.ReaderAt, size int64, path string, opts PutOptions) (*FileInfo, *PutStats, error) {
	comps, err := splitPath(path)
	if err == nil && len(comps) == 0 {
		err = manifest.ErrIsDir
	}
	if err == nil {
		err = creatable(comps)
	}
	if err != nil {
		return nil, nil, pathErr("put", path, err)
	}
	in := &ingest{s: s, src: src, size: size, comps: comps, opts: opts, states: map[blockstore.ID]*chunkState{}}
	fi, err := in.run(ctx)
	in.finish(err)
	if err != nil {
		return nil, nil, pathErr("put", path, err)
	}
	return fi, &in.stats, nil
}

// wholeSum is the hex sha256 of a blob's whole content: hashed as its
// batches were read, or, for a blob of at most one chunk, its chunk's ID
// (the engine's blocks of 64 KiB are one chunk each, and the hash was
// half of their commit's CPU). A small blob that is not one chunk (empty,
// or left as a zero run) is read and hashed here.
func (in *ingest) wholeSum() (string, error) {
	if in.blob != nil {
		return hex.EncodeToString(in.blob.Sum(nil)), nil
	}
	if len(in.refs) == 1 && !in.refs[0].zero && in.refs[0].off == 0 && in.refs[0].n == in.size {
		return in.refs[0].id.String(), nil
	}
	b := make([]byte, in.size)
	if n, err := in.src.ReadAt(b, 0); n < len(b) {
		return "", fmt.Errorf("read source to hash it: %d of %d bytes: %w", n, len(b), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ingest is the state of one Put.
type ingest struct {
	s       *Store
	src     io.ReaderAt
	size    int64
	comps   []string
	opts    PutOptions
	plan    *plan
	refs    []chunkRef
	states  map[blockstore.ID]*chunkState
	blob    hashWriter // sha256 of the whole content, for blob files
	blobSum string     // its hex digest, once read, or as the writer gave it
	slots   []*packSlot
	stats   PutStats
	jobs    chan<- writeJob // the writer goroutine's queue, while chunking
	// mapper, when set, maps source batches instead of mapSource.
	mapper func(src io.ReaderAt, off, n int64) (mapping, bool)
	// target, when set, is the inode whose name the new content takes
	// (CommitIno); otherwise comps name the destination.
	target uint64
	// adopt, when set, is the source as a spool file that may become a
	// pack as it is; fresh are its new chunks, placed after chunking.
	adopt   *os.File
	hold    bool      // hold the new inode (CommitOptions.Hold)
	ctime   time.Time // CommitOptions.Ctime; zero means now
	fresh   []chunkRef
	adopted *adoptedPack
	// keep, for a commit of changes (CommitChanges), are the unchanged
	// extents of the previous version and the zero runs, merged with the
	// chunked changes by offset; prevManifest is the previous version's
	// manifest ID, which the commit checks it still replaces.
	keep         []chunkRef
	prevManifest string
	// pinsMoved are the caller's pins of the target that the commit drops
	// (CommitOptions.Unhold and Close), closeFiles its files.
	pinsMoved  int
	closeFiles []*File
	// txDone: the commit's transaction succeeded (even if its sync
	// failed), so finish must not roll its packs back.
	txDone bool
	// journaled are the data records that carry its new bytes, by pack
	// (inline.go).
	journaled map[uint32]taint
	// known are the sums of chunks that the writer computed as it wrote
	// them, by file offset (Changes.Pieces): a chunk of the plan at that
	// offset and of that length is not hashed again.
	known map[int64]knownSum
}

// knownSum is the sha256 of the n bytes at a file offset.
type knownSum struct {
	n   int64
	sum blockstore.ID
	cut bool // Piece.Cut
}

// adoptedPack is a spool file renamed into the packs directory.
type adoptedPack struct {
	pack       uint32
	size, dead int64
	spoolPath  string           // where it came from, to give it back on failure
	holes      []blockstore.Loc // its dead ranges, punched after the commit
}

// ErrNameMismatch: an inode's own Parent and Name do not lead back to it.
// The index is inconsistent; a commit fails rather than guess where the
// content goes.
var ErrNameMismatch = errors.New("inode's name does not lead to it")

// destination resolves, inside the commit transaction, where the new inode
// goes and what it replaces. A commit to an inode (CommitIno) goes to the
// entry the inode itself names, as bytes: it never walks a path. It
// satisfies fs.ErrNotExist only when the inode has no name any more
// (unlinked, or replaced by a rename, while it was written), so that the
// caller may drop the content; a name that does not lead back to the inode
// is ErrNameMismatch, never silent success.
func (in *ingest) destination(tx *manifest.Tx) (parent uint64, name string, prev *manifest.Inode, err error) {
	if in.target != 0 {
		prev, err = tx.Inode(in.target)
		if errors.Is(err, manifest.ErrNotFound) {
			return 0, "", nil, fs.ErrNotExist // unlinked and released
		}
		if err != nil {
			return 0, "", nil, err
		}
		if prev.Name == "" {
			return 0, "", nil, fs.ErrNotExist // unlinked, kept while open
		}
		if cur, err := tx.Lookup(prev.Parent, prev.Name); err != nil || cur != prev.Ino {
			return 0, "", nil, fmt.Errorf("%w: inode %d is named %q in directory %d, which leads to inode %d (%v)",
				ErrNameMismatch, prev.Ino, prev.Name, prev.Parent, cur, err)
		}
		return prev.Parent, prev.Name, prev, nil
	}
	if parent, err = parentOf(tx, in.comps, in.owner()); err != nil {
		return 0, "", nil, err
	}
	name = in.comps[len(in.comps)-1]
	if old, err := tx.Lookup(parent, name); err == nil {
		if prev, err = tx.Inode(old); err != nil {
			return 0, "", nil, err
		}
	}
	return parent, name, prev, nil
}

// owner is who owns what the ingest creates (PutOptions.Owner).
func (in *ingest) owner() *Owner {
	if in.opts.Owner != nil {
		return in.opts.Owner
	}
	return &in.s.owner
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (in *ingest) run(ctx context.Context) (*FileInfo, error) {
	s := in.s
	s.reserve.fill() // before the write takes the room (no-op while held)
	// CommitChanges plans its own.
	if in.plan == nil {
		in.plan = s.planFor(in.src, in.size, in.comps)
	}
	in.stats.Kind, in.stats.Note = in.plan.kind, in.plan.note
	// A blob of at most one chunk is that chunk, whose ID is the sha256
	// of the same bytes: it is not hashed a second time (wholeSum).
	if in.plan.kind == kindBlob && in.size > s.chunkSize && in.blobSum == "" {
		in.blob = sha256.New()
	}
	t0 := time.Now()
	if err := in.chunkAll(ctx); err != nil {
		return nil, in.faultCause(err)
	}
	if in.keep != nil {
		in.refs = mergeRefs(in.refs, in.keep)
	}
	var placed time.Duration // of chunked: placing new chunks
	if in.adopt != nil {
		tp := time.Now()
		if err := in.place(); err != nil {
			return nil, err
		}
		placed = time.Since(tp)
	}
	chunked := time.Since(t0)
	if in.plan.kind == kindBlob {
		if in.blobSum == "" { // else given (Changes.BlobSum)
			sum, err := in.wholeSum()
			if err != nil {
				return nil, err
			}
			in.blobSum = sum
		}
		if name := in.comps[len(in.comps)-1]; hex64.MatchString(name) && name != in.blobSum {
			return nil, fmt.Errorf("%w: sha256 is %s", ErrBlobMismatch, in.blobSum)
		}
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	for attempt := 0; ; attempt++ {
		if err := in.sync(); err != nil {
			return nil, err
		}
		t1 := time.Now()
		fi, missing, err := in.commit()
		if err == nil {
			s.log.Debug("ingested", "path", fi.Path, "bytes", in.size, "kind", in.stats.Kind,
				"new", in.stats.NewBytes, "reused", in.stats.ReusedBytes, "chunk", chunked, "place", placed,
				"sync", t1.Sub(t0)-chunked, "commit", time.Since(t1))
			if in.stats.NewBytes > 0 {
				s.KickEviction() // it may be over capacity now
			}
			return fi, nil
		}
		if !errors.Is(err, errMissing) || attempt == 3 {
			return nil, err
		}
		// Chunks reused from the index were released before the commit:
		// write them again from the source.
		if err := in.rewrite(ctx, missing); err != nil {
			return nil, err
		}
	}
}

var errMissing = errors.New("reused chunks were released")

// rewrite appends again the chunks that were released before the commit.
func (in *ingest) rewrite(ctx context.Context, missing []blockstore.ID) error {
	for _, id := range missing {
		if err := ctx.Err(); err != nil {
			return err
		}
		st := in.states[id]
		var n int64
		for _, c := range in.refs {
			if c.id == id && !c.zero {
				n = c.n
				break
			}
		}
		buf := make([]byte, n)
		if _, err := in.src.ReadAt(buf, st.off); err != nil && !(err == io.EOF && int64(len(buf)) == n) {
			return fmt.Errorf("read source at %d: %w", st.off, err)
		}
		if blockstore.Sum(buf) != id {
			return fmt.Errorf("source changed during ingest (bytes at %d)", st.off)
		}
		app, loc, err := in.reserve(n)
		if err != nil {
			return err
		}
		if err := app.WriteAt(buf, loc.Off); err != nil {
			return err
		}
		st.written, st.loc = true, loc
		in.stats.NewChunks++
		in.stats.NewBytes += n
	}
	return nil
}

// commit publishes the file in one transaction: chunk records and
// refcounts, pack lengths, the inode, its manifest and its name.
func (in *ingest) commit() (*FileInfo, []blockstore.ID, error) {
	s := in.s
	m := make(manifest.Manifest, 0, len(in.refs))
	for _, c := range in.refs {
		m = append(m, manifest.Extent{Zero: c.zero, ID: c.id, Len: c.n})
	}
	in.stats.Chunks = len(m)
	in.stats.Parent = in.plan.parentIno
	mode := in.opts.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	mtime := in.opts.Mtime
	if mtime.IsZero() {
		mtime = time.Now()
	}
	var fi *FileInfo
	var missing []blockstore.ID
	var freed []blockstore.Loc
	var held uint64
	var releasePrev bool
	var lengths map[uint32]int64 // of the shared packs
	var dups []blockstore.Loc    // chunks written that a concurrent ingest stored first
	update := s.updateReleasingSeq
	if in.size == 0 {
		// Emptying a file (truncate, an O_TRUNC rewrite) is how room is
		// made too: on a full disk it may use the reserve.
		update = func(fn func(*manifest.Tx) error) (uint64, error) { return s.freeingSeq("truncate", fn) }
	}
	seq, err := update(func(tx *manifest.Tx) error {
		missing = missing[:0]
		if held != 0 {
			s.unpinHeld(held) // an earlier try did not commit
			held = 0
		}
		var shared map[blockstore.ID]bool
		var err error
		if releasePrev, shared, err = in.releasable(tx); err != nil {
			return err
		}
		moved := map[blockstore.ID]bool{} // listed by both versions
		dead := map[uint32]int64{}
		dups = dups[:0]
		// Sorted keys make bbolt's inserts sequential: far fewer page
		// splits than the manifest's order.
		ids := m.Chunks()
		slices.SortFunc(ids, func(a, b blockstore.ID) int { return bytes.Compare(a[:], b[:]) })
		for _, id := range ids {
			st := in.states[id]
			if shared[id] && !st.written {
				moved[id] = true // the released version's reference moves here
				continue
			}
			c, err := tx.Chunk(id)
			switch {
			case err == nil:
				c.Refs++
				if st.written {
					dead[st.loc.Pack] += st.loc.Len // a concurrent ingest stored it first
					dups = append(dups, st.loc)
				}
			case !errors.Is(err, manifest.ErrNotFound):
				return err
			case st.written:
				c = manifest.Chunk{Loc: st.loc, Refs: 1}
			default:
				missing = append(missing, id)
				continue
			}
			if err := tx.PutChunk(id, c); err != nil {
				return err
			}
		}
		if len(missing) > 0 {
			return errMissing
		}
		if a := in.adopted; a != nil {
			if err := tx.PutPack(a.pack, manifest.Pack{Committed: a.size, Dead: a.dead + dead[a.pack]}); err != nil {
				return err
			}
		}
		if lengths, err = in.recordPacks(tx, dead); err != nil {
			return err
		}
		parent, name, prev, err := in.destination(tx)
		if err != nil {
			return err
		}
		if in.prevManifest != "" && (prev == nil || prev.ManifestID != in.prevManifest) {
			return fmt.Errorf("%w: inode %d's content changed while its changes were committed", errChangedBase, in.target)
		}
		// The name may have changed since the ingest began (a rename of
		// the file being written): a blob name must match this content.
		if dir, err := tx.Inode(parent); err != nil {
			return err
		} else if err := s.checkBlobName(tx, &manifest.Inode{Blob: in.blobSum, Name: name, Size: in.size}, dir, name); err != nil {
			return err
		}
		var keep map[string][]byte // the attributes a new version keeps
		if prev != nil {
			if prev.IsDir() {
				return manifest.ErrIsDir
			}
			if in.target != 0 {
				keep = tx.XattrValues(prev.Ino, prev.Xattrs)
			}
			if releasePrev {
				freed, err = s.releaseInodeExcept(tx, prev, moved)
			} else {
				freed, err = s.dropInode(tx, prev)
			}
			if err != nil {
				return err
			}
		}
		ino, err := tx.NextIno()
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		if !in.ctime.IsZero() {
			now = in.ctime.UnixNano()
		}
		n := &manifest.Inode{Ino: ino, Mode: mode, Size: m.Size(), Mtime: mtime.UnixNano(), Ctime: now,
			ManifestID: m.ID(), Kind: in.plan.kind, Note: in.plan.note, Layout: in.plan.layout,
			Parent: parent, Name: name, UID: in.owner().UID, GID: in.owner().GID}
		// A new version of the same file keeps its attributes (its
		// access time too: writing is no access), its extended
		// attributes and its identity; its directory does not change
		// (the name stays), unlike a new file or one that replaces
		// another.
		newVersion := prev != nil && in.target != 0
		if newVersion {
			n.Mode, n.UID, n.GID = prev.Mode, prev.UID, prev.GID
			n.Identity = prev.ID()
			n.Atime = prev.AccessTime()
			// A chmod or xattr change after the writes this version
			// holds came later than they did.
			n.Ctime = max(n.Ctime, prev.Ctime)
			if err := tx.PutXattrs(ino, keep); err != nil {
				return err
			}
		}
		n.Blob = in.blobSum
		if err := tx.PutInode(n); err != nil {
			return err
		}
		if err := tx.PutManifest(ino, m); err != nil {
			return err
		}
		if err := tx.Link(parent, name, ino); err != nil {
			return err
		}
		if n.Layout != "" {
			if err := tx.AddSnapshot(n.Layout, ino, in.plan.tokens); err != nil {
				return err
			}
			if in.plan.prefix != nil {
				if err := tx.AddPrefix(ino, in.plan.prefix); err != nil {
					return err
				}
			}
		}
		if n.Blob != "" {
			if err := tx.AddBlob(n.Blob, ino); err != nil {
				return err
			}
			if err := blobStored(tx, n.Blob, m); err != nil {
				return err
			}
		}
		if len(in.plan.pins) > 0 {
			if err := pinBlobs(tx, ino, in.plan.pins); err != nil {
				return err
			}
		}
		if !newVersion {
			if err := touchDir(tx, parent); err != nil {
				return err
			}
		}
		fi = info(path.Join(in.comps...), name, n)
		if in.hold {
			// Last, so that no error of this function leaves it held;
			// releases wait for the pin lock this transaction holds.
			s.pin(ino)
			held = ino
		}
		return nil
	})
	if err != nil {
		if held != 0 {
			s.unpinHeld(held) // the transaction did not commit
		}
		return nil, missing, err
	}
	in.committed(lengths)
	in.txDone = true
	if a := in.adopted; a != nil {
		freed = append(freed, a.holes...)
	}
	freed = append(freed, dups...)
	s.punch(freed)
	in.dropPins(releasePrev)
	// A file's commit is a durability point (fsync, last close, put):
	// its journal record, and every one before it, is synced before the
	// commit returns; concurrent commits share the sync (journal.go). A
	// failure leaves the commit in the index, not durable (the journal
	// fails every later sync too, until the store is opened again); the
	// caller learns that its fsync failed.
	if err := s.db.Sync(seq); err != nil {
		return nil, nil, err
	}
	return fi, nil, nil
}

// releasable reports whether the commit releases the version it replaces
// in its transaction: a commit to an inode whose pins are all the
// caller's, which it drops (CommitOptions.Unhold, Close). Then shared are
// the chunks of that version, whose counts do not change for the chunks
// that the new version lists too. Called in the commit's transaction,
// which holds the pin lock: no pin can be taken meanwhile.
func (in *ingest) releasable(tx *manifest.Tx) (bool, map[blockstore.ID]bool, error) {
	if in.pinsMoved == 0 || in.target == 0 {
		return false, nil, nil
	}
	in.s.mu.Lock()
	mine := in.s.open[in.target] == in.pinsMoved
	in.s.mu.Unlock()
	if !mine {
		return false, nil, nil
	}
	n, err := tx.Inode(in.target)
	if errors.Is(err, manifest.ErrNotFound) {
		return false, nil, nil // destination says what to do
	}
	if err != nil {
		return false, nil, err
	}
	if n.IsDir() || n.Blob != "" || n.Name == "" {
		return false, nil, nil // the usual drop (blob records, orphans)
	}
	m, err := tx.Manifest(in.target)
	if err != nil {
		return false, nil, err
	}
	shared := make(map[blockstore.ID]bool, len(m))
	for _, id := range m.Chunks() {
		shared[id] = true
	}
	return true, shared, nil
}

// dropPins drops the caller's pins of the replaced version after a
// successful commit: only counts when the commit released it, otherwise
// as unpins (the last one releases the orphan).
func (in *ingest) dropPins(released bool) {
	s := in.s
	for _, f := range in.closeFiles {
		f.closeOnce.Do(func() {})
	}
	if released {
		s.mu.Lock()
		if s.open[in.target] -= in.pinsMoved; s.open[in.target] <= 0 {
			delete(s.open, in.target)
		}
		s.mu.Unlock()
		return
	}
	for range in.pinsMoved {
		if err := s.unpin(in.target); err != nil {
			s.log.Warn("release the replaced version", "ino", in.target, "err", err)
		}
	}
}
