package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// File is an open committed file. Its content is pinned: while it is open
// its chunks stay, even if its name is removed or replaced. It implements
// io.ReaderAt with the interface's full contract: concurrent calls are
// safe, and n < len(p) only with an error (io.EOF at the end).
type File struct {
	s    *Store
	ino  uint64
	path string
	size int64
	m    manifest.Manifest
	// exts maps file offsets to chunk locations, resolved once at open.
	exts []extent
	// verify checks every chunk read, whether or not the store does.
	verify bool
	// damaged: some extent is a damaged run (fsck_damage.go), so reads
	// take the copying path, which checks for them.
	damaged bool

	closeOnce sync.Once
}

// SetVerify makes reads through f check every chunk's sha256 (or not,
// unless the store verifies all reads). Call it before reading.
func (f *File) SetVerify(v bool) { f.verify = v }

type extent struct {
	off  int64 // file offset
	n    int64
	zero bool
	// damaged runs (also zero) read as ErrDamaged.
	damaged bool
	id      blockstore.ID
	loc     blockstore.Loc
}

// Open opens the committed file at path for reading. The path is resolved
// and the file pinned in one transaction, so a rename over it or a remove
// either comes before (and the open sees what the name leads to then) or
// after (and the file stays, as an orphan, while open).
func (s *Store) Open(path string) (*File, error) {
	comps, err := splitPath(path)
	if err != nil {
		return nil, pathErr("open", path, err)
	}
	var f *File
	err = s.viewPinning(func(tx *manifest.Tx) error {
		ino, err := walk(tx, comps)
		if err != nil {
			return err
		}
		f, err = s.openTx(tx, ino)
		return err
	})
	if err != nil {
		return nil, pathErr("open", path, err)
	}
	f.path = path
	return f, nil
}

// openIno pins an inode and resolves its manifest (see openTx).
func (s *Store) openIno(ino uint64) (*File, error) {
	var f *File
	err := s.viewPinning(func(tx *manifest.Tx) (err error) {
		f, err = s.openTx(tx, ino)
		return err
	})
	return f, err
}

// openTx pins an inode and resolves its manifest in tx, which must run
// under the pin lock (viewPinning): a concurrent release then either sees
// the pin (and keeps the chunks) or committed before tx began (and the
// open fails); see Store.pins.
func (s *Store) openTx(tx *manifest.Tx, ino uint64) (*File, error) {
	f := &File{s: s, ino: ino, path: fmt.Sprintf("inode %d", ino)}
	n, err := tx.Inode(ino)
	if errors.Is(err, manifest.ErrNotFound) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	if n.IsDir() {
		return nil, manifest.ErrIsDir
	}
	m, err := tx.Manifest(ino)
	if err != nil {
		return nil, err
	}
	var off int64
	f.exts = make([]extent, 0, len(m))
	for _, e := range m {
		x := extent{off: off, n: e.Len, zero: e.Zero, damaged: e.Damaged, id: e.ID}
		f.damaged = f.damaged || e.Damaged
		if !e.Zero {
			c, err := tx.Chunk(e.ID)
			if err != nil {
				return nil, fmt.Errorf("chunk %s of inode %d: %w", e.ID, ino, err)
			}
			x.loc = c.Loc
		}
		f.exts = append(f.exts, x)
		off += e.Len
	}
	f.m, f.size = m, off
	s.pin(ino)
	return f, nil
}

// Size is the file's length.
func (f *File) Size() int64 { return f.size }

// Ino is the file's inode number.
func (f *File) Ino() uint64 { return f.ino }

// ReadAt reads len(p) bytes at off.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", f.path)
	}
	if off >= f.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > f.size-off {
		p = p[:f.size-off]
	}
	i := sort.Search(len(f.exts), func(i int) bool { return f.exts[i].off+f.exts[i].n > off })
	n := 0
	for n < len(p) {
		e := &f.exts[i]
		in := off + int64(n) - e.off
		k := int(min(int64(len(p)-n), e.n-in))
		if e.damaged {
			return n, fmt.Errorf("read %s at %d: %w", f.path, e.off+in, ErrDamaged)
		} else if e.zero {
			clear(p[n : n+k])
		} else if err := f.readChunk(p[n:n+k], e, in); err != nil {
			return n, err
		}
		n += k
		i++
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// readChunk reads part of one chunk, verifying the whole chunk first when
// the store verifies.
func (f *File) readChunk(p []byte, e *extent, in int64) error {
	if !f.s.verify && !f.verify {
		if _, err := f.s.chunks.ReadAt(p, e.loc, in); err != nil {
			return fmt.Errorf("read %s at %d: %w", f.path, e.off+in, err)
		}
		return nil
	}
	buf := make([]byte, e.loc.Len)
	if err := f.s.chunks.ReadChunk(buf, e.id, e.loc, true); err != nil {
		f.s.log.Error("corrupt chunk", "file", f.path, "offset", e.off, "chunk", e.id.String(), "err", err)
		return fmt.Errorf("read %s at file offset %d: %w", f.path, e.off, err)
	}
	copy(p, buf[in:])
	return nil
}

// Close unpins the file; if it was removed while open and this was its
// last handle, its chunks are released.
func (f *File) Close() error {
	var err error
	f.closeOnce.Do(func() { err = f.s.unpin(f.ino) })
	return err
}

// pin counts a handle of an inode. Callers hold s.pins (see Store.pins).
func (s *Store) pin(ino uint64) {
	s.mu.Lock()
	s.open[ino]++
	s.mu.Unlock()
}

// unpinHeld takes back a pin of an inode that a failed transaction was
// to create: there is nothing to release.
func (s *Store) unpinHeld(ino uint64) {
	s.mu.Lock()
	if s.open[ino]--; s.open[ino] <= 0 {
		delete(s.open, ino)
	}
	s.mu.Unlock()
}

func (s *Store) unpin(ino uint64) error {
	s.mu.Lock()
	s.open[ino]--
	last := s.open[ino] == 0
	if last {
		delete(s.open, ino)
	}
	s.mu.Unlock()
	if !last {
		return nil
	}
	var orphan bool
	s.db.View(func(tx *manifest.Tx) error {
		orphan = tx.IsOrphan(ino)
		return nil
	})
	if orphan {
		return s.releaseOrphan(ino)
	}
	return nil
}

// Segment is one run of a file's bytes: Len bytes at Off of a pack file
// (Fd, valid until the Segments holding it are released; do not close
// it), or Len zeros (Fd nil).
type Segment struct {
	Fd  *os.File
	Off int64
	Len int
}

// Segments is a range of a file mapped to pack ranges and zero runs. It
// holds the descriptors of the packs it names open until Release, so that
// bytes can be moved from them (spliced) after the call that mapped them
// has returned.
type Segments struct {
	List  []Segment
	packs []*blockstore.PackFile // held, one per pack in List
}

// Release gives back the pack descriptors; the Fds of List must not be
// used afterwards. Releasing nil or twice does nothing.
func (s *Segments) Release() {
	if s == nil {
		return
	}
	for _, pf := range s.packs {
		pf.Release()
	}
	s.packs = nil
}

// acquire returns the held descriptor of pack, acquiring it the first
// time.
func (s *Segments) acquire(d *blockstore.Dir, pack uint32) (*os.File, error) {
	for _, pf := range s.packs {
		if pf.Pack() == pack {
			return pf.File(), nil
		}
	}
	pf, err := d.Acquire(pack)
	if err != nil {
		return nil, err
	}
	s.packs = append(s.packs, pf)
	return pf.File(), nil
}

// Segments maps [off, off+n) (clipped to the file) to pack ranges and zero
// runs, for callers that move bytes without copying them (splice); the
// caller must Release them. ok is false when the store or the file
// verifies reads (then bytes must go through ReadAt, which checks them),
// when the range is empty, or when a pack cannot be opened (ReadAt then
// reports why).
func (f *File) Segments(off int64, n int) (segs *Segments, ok bool) {
	if f.s.verify || f.verify || f.damaged || off < 0 || off >= f.size || n <= 0 {
		return nil, false
	}
	segs = &Segments{}
	end := min(off+int64(n), f.size)
	i := sort.Search(len(f.exts), func(i int) bool { return f.exts[i].off+f.exts[i].n > off })
	for ; off < end; i++ {
		e := &f.exts[i]
		k := min(end, e.off+e.n) - off
		s := Segment{Len: int(k)}
		if !e.zero {
			fd, err := segs.acquire(f.s.packs, e.loc.Pack)
			if err != nil {
				segs.Release()
				return nil, false
			}
			s.Fd, s.Off = fd, e.loc.Off+off-e.off
		}
		l := segs.List
		if last := len(l) - 1; last >= 0 && l[last].Fd == s.Fd && (s.Fd == nil || l[last].Off+int64(l[last].Len) == s.Off) {
			l[last].Len += s.Len // contiguous in the pack, or zeros after zeros
		} else {
			segs.List = append(l, s)
		}
		off += k
	}
	return segs, true
}
