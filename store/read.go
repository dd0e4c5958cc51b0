package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"

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
	// exts maps file offsets to chunks. Where each chunk lies is looked
	// up at the first read that needs it (resolve), not at open: a reader
	// of a few bytes (the engine's scan reads every snapshot's header)
	// then pays for the chunks it reads, not for every chunk of the file.
	// The file pins its inode, so its chunks stay in the index meanwhile.
	exts []extent
	// resolving serialises lookups of chunk places (resolve).
	resolving sync.Mutex
	// verify checks every chunk read, whether or not the store does.
	verify bool
	// damaged: some extent is a damaged run (fsck_damage.go), so reads
	// take the copying path, which checks for them.
	damaged bool
	// moved holds the places of chunks that compaction moved since the
	// file was opened, looked up again when their old pack had gone
	// (relocate); copied on write, so reads take no lock.
	moved atomic.Pointer[map[blockstore.ID]blockstore.Loc]

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
	// loc is where the chunk lay when resolve looked it up; valid once
	// known is set (reads check known without a lock).
	loc   blockstore.Loc
	known atomic.Bool
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

// openTx pins an inode and reads its manifest in tx, which must run
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
	f.exts = make([]extent, len(m))
	for i, e := range m {
		x := &f.exts[i]
		x.off, x.n, x.zero, x.damaged, x.id = off, e.Len, e.Zero, e.Damaged, e.ID
		f.damaged = f.damaged || e.Damaged
		off += e.Len
	}
	f.m, f.size = m, off
	s.pin(ino)
	s.noteUse(ino) // retention (recency.go)
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
	i, j := f.span(off, off+int64(len(p)))
	if err := f.resolve(i, j); err != nil {
		return 0, fmt.Errorf("read %s at %d: %w", f.path, off, err)
	}
	n := 0
	for n < len(p) {
		e := &f.exts[i]
		in := off + int64(n) - e.off
		k := int(min(int64(len(p)-n), e.n-in))
		if e.damaged {
			return n, fmt.Errorf("read %s at %d: %w", f.path, e.off+in, ErrDamaged)
		} else if e.zero {
			clear(p[n : n+k])
		} else if m, j, err := f.readRun(p[n:], i, in, k); err != nil {
			return n, err
		} else if m > 0 {
			n, i = n+m, j
			continue
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

// readRun reads, with one pread, the chunks from extent i on that lie one
// after the other in one pack, from in bytes into extent i (k of whose
// bytes p takes), as far as p goes: a snapshot written whole is mostly one
// run of its pack, which a read chunk by chunk took one pread per 64 KiB
// for (the trimmed view's reads, issue 28). It returns the bytes read and
// the next extent, or 0 when extent i starts no run of two or more, or
// when the store verifies chunks (each is read whole then), or when the
// pack has gone (compaction moved its chunks): the caller reads chunk by
// chunk, looking each up again.
func (f *File) readRun(p []byte, i int, in int64, k int) (int, int, error) {
	if f.s.verify || f.verify {
		return 0, 0, nil
	}
	loc := f.locOf(&f.exts[i])
	m, j := k, i+1
	end := loc.Off + in + int64(k)
	for ; j < len(f.exts) && m < len(p); j++ {
		x := &f.exts[j]
		if x.zero || x.damaged {
			break
		}
		xl := f.locOf(x)
		if xl.Pack != loc.Pack || xl.Off != end || x.n > xl.Len {
			break
		}
		t := int(min(int64(len(p)-m), x.n))
		m, end = m+t, end+int64(t)
	}
	if j == i+1 {
		return 0, 0, nil
	}
	run := blockstore.Loc{Pack: loc.Pack, Off: loc.Off + in, Len: int64(m)}
	if _, err := f.s.chunks.ReadAt(p[:m], run, 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("read %s at %d: %w", f.path, f.exts[i].off+in, err)
	}
	return m, j, nil
}

// readChunk reads part of one chunk, verifying the whole chunk first when
// the store verifies.
func (f *File) readChunk(p []byte, e *extent, in int64) error {
	if !f.s.verify && !f.verify {
		err := f.withLoc(e, func(loc blockstore.Loc) error {
			_, err := f.s.chunks.ReadAt(p, loc, in)
			return err
		})
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", f.path, e.off+in, err)
		}
		return nil
	}
	buf := make([]byte, e.loc.Len)
	err := f.withLoc(e, func(loc blockstore.Loc) error { return f.s.chunks.ReadChunk(buf, e.id, loc, true) })
	if err != nil {
		f.s.log.Error("corrupt chunk", "file", f.path, "offset", e.off, "chunk", e.id.String(), "err", err)
		return fmt.Errorf("read %s at file offset %d: %w", f.path, e.off, err)
	}
	copy(p, buf[in:])
	return nil
}

// span returns the indexes [i, j) of the extents that hold [off, end),
// a non-empty range inside the file.
func (f *File) span(off, end int64) (i, j int) {
	i = sort.Search(len(f.exts), func(i int) bool { return f.exts[i].off+f.exts[i].n > off })
	j = i + sort.Search(len(f.exts)-i, func(k int) bool { return f.exts[i+k].off >= end })
	return i, j
}

// resolve looks up where the chunks of extents [i, j) lie, those not
// looked up yet, in one transaction. The file's pin keeps every chunk of
// its manifest in the index, so a lookup after the open finds each one,
// where it lies now; a chunk that compaction moves later is looked up
// again by the read that finds its pack gone (withLoc).
func (f *File) resolve(i, j int) error {
	for k := i; k < j; k++ {
		if e := &f.exts[k]; !e.zero && !e.known.Load() {
			return f.resolveSlow(i, j)
		}
	}
	return nil
}

func (f *File) resolveSlow(i, j int) error {
	f.resolving.Lock()
	defer f.resolving.Unlock()
	return f.s.db.View(func(tx *manifest.Tx) error {
		for k := i; k < j; k++ {
			e := &f.exts[k]
			if e.zero || e.known.Load() {
				continue
			}
			c, err := tx.Chunk(e.id)
			if err != nil {
				return fmt.Errorf("chunk %s of inode %d: %w", e.id, f.ino, err)
			}
			e.loc = c.Loc
			e.known.Store(true)
		}
		return nil
	})
}

// locOf is where e's chunk lies: where resolve found it, unless compaction
// has moved it since and a read found out. e must be resolved.
func (f *File) locOf(e *extent) blockstore.Loc {
	if m := f.moved.Load(); m != nil {
		if l, ok := (*m)[e.id]; ok {
			return l
		}
	}
	return e.loc
}

// withLoc runs read with the place of e's chunk; if its pack has gone
// (compaction moved the chunk and removed the pack: compact.go), it looks
// the chunk up again and retries. The file pins its inode, so its chunks
// stay in the index; a chunk moved again meanwhile is looked up again.
func (f *File) withLoc(e *extent, read func(blockstore.Loc) error) error {
	loc := f.locOf(e)
	for range 8 {
		err := read(loc)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		now, rerr := f.relocate(e.id)
		if rerr != nil || now == loc {
			return err
		}
		loc = now
	}
	return read(loc)
}

// relocate looks up again where the file's chunks lie (all of them that
// were looked up before, in one transaction: a compaction that moved one
// moved its neighbours too), notes their places and returns id's. e's
// chunk is among them: it was resolved before its read.
func (f *File) relocate(id blockstore.ID) (blockstore.Loc, error) {
	m := map[blockstore.ID]blockstore.Loc{}
	err := f.s.db.View(func(tx *manifest.Tx) error {
		for i := range f.exts {
			e := &f.exts[i]
			if e.zero || !e.known.Load() {
				continue
			}
			if _, ok := m[e.id]; ok {
				continue
			}
			c, err := tx.Chunk(e.id)
			if err != nil {
				return fmt.Errorf("chunk %s: %w", e.id, err)
			}
			m[e.id] = c.Loc
		}
		return nil
	})
	if err != nil {
		return blockstore.Loc{}, err
	}
	f.moved.Store(&m)
	return m[id], nil
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
	// Under the pin lock's read side, as a pin is taken: a releasing
	// transaction that saw this pin, and so is making the inode an
	// orphan, has committed before the orphan check below, which sees
	// the orphan; one that has not begun will see no pin and release the
	// inode itself. Unordered, the check could read the store from before
	// such a transaction's commit and leave an orphan that nothing holds
	// (a lookup's lease ending as a rename replaced its file did).
	s.pins.RLock()
	s.mu.Lock()
	s.open[ino]--
	last := s.open[ino] == 0
	if last {
		delete(s.open, ino)
	}
	s.mu.Unlock()
	var orphan bool
	if last {
		s.db.View(func(tx *manifest.Tx) error {
			orphan = tx.IsOrphan(ino)
			return nil
		})
	}
	s.pins.RUnlock()
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
	i, j := f.span(off, end)
	if f.resolve(i, j) != nil {
		return nil, false // ReadAt reports why
	}
	for ; off < end; i++ {
		e := &f.exts[i]
		k := min(end, e.off+e.n) - off
		s := Segment{Len: int(k)}
		if !e.zero {
			loc := f.locOf(e)
			fd, err := segs.acquire(f.s.packs, loc.Pack)
			if err != nil {
				segs.Release()
				return nil, false // ReadAt looks a moved chunk up again
			}
			s.Fd, s.Off = fd, loc.Off+off-e.off
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
