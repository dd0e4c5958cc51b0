package blockstore

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// DefaultPackBytes is the size at which an ingest moves to a new pack.
// Packs are shared by the commits of many files, so their number grows
// with the bytes stored, not with the files; small enough that a pack
// whose chunks have all died is removed whole while the store is in use.
const DefaultPackBytes = 64 << 20

// DefaultMaxOpen is how many pack read descriptors a Dir keeps open when
// Options.MaxOpen is 0, unless the process's descriptor limit is low: then
// an eighth of that limit, so that spools, appenders, the index and client
// connections keep the rest.
const DefaultMaxOpen = 256

// defaultMaxOpen is DefaultMaxOpen bounded by the descriptor limit.
func defaultMaxOpen() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur/8 >= DefaultMaxOpen {
		return DefaultMaxOpen
	}
	return max(int(lim.Cur/8), 4)
}

// Options configure a Dir.
type Options struct {
	// MaxOpen bounds the read descriptors kept open for packs (0 means
	// DefaultMaxOpen): the least recently used idle one is closed when
	// another is opened past the bound. A descriptor in use is never
	// closed, so while more than MaxOpen packs are being read at once,
	// each of them has its descriptor open.
	MaxOpen int
}

// Dir is the local implementation: packs in one directory, named
// NNNNNN.pack. It is safe for concurrent use.
//
// Readers share one read-only descriptor per pack (Acquire), counted by
// references. A store can hold any number of packs, so the descriptors
// form an LRU cache bounded by Options.MaxOpen: only descriptors that no
// one holds are closed, because a descriptor number that is closed (and
// reused by the next open) under a reader would make it read, or splice
// to the kernel, another file's bytes.
type Dir struct {
	path    string
	maxOpen int

	mu sync.Mutex // guards everything below and every PackFile's refs, elem, detached
	// files holds the open read descriptors by pack, in use or idle.
	files map[uint32]*PackFile
	// idle lists the descriptors in files that no one holds, most
	// recently released first: the candidates for closing.
	idle list.List
	// open counts read descriptors open: those in files plus those of
	// removed packs still in use.
	open int
	// removals counts Remove calls, so that a descriptor opened while its
	// pack was being removed is not kept for later readers.
	removals uint64
	closed   bool
}

// PackFile is a read descriptor of a pack, shared by everyone who acquired
// it and kept open until each of them has released it.
type PackFile struct {
	d    *Dir
	pack uint32
	f    *os.File
	refs int           // holders; guarded by d.mu
	elem *list.Element // place in d.idle while refs is 0; guarded by d.mu
	// detached is set when the pack is removed or d closed while the
	// descriptor is in use: it is no longer in d.files, and the last
	// Release closes it. Guarded by d.mu.
	detached bool
}

// Open opens (creating if needed) the pack directory with default options.
func Open(path string) (*Dir, error) { return OpenWith(path, Options{}) }

// OpenWith opens (creating if needed) the pack directory.
func OpenWith(path string, opts Options) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("open packs %s: %w", path, err)
	}
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = defaultMaxOpen()
	}
	return &Dir{path: path, maxOpen: opts.MaxOpen, files: map[uint32]*PackFile{}}, nil
}

// Path returns the file path of a pack.
func (d *Dir) Path(pack uint32) string {
	return filepath.Join(d.path, fmt.Sprintf("%06d.pack", pack))
}

// Packs lists the packs present on disk with their sizes.
func (d *Dir) Packs() (map[uint32]int64, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("list packs %s: %w", d.path, err)
	}
	out := map[uint32]int64{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pack")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 32)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// A pack moved elsewhere and linked: its size is the
			// target's, as reads (which follow the link) see it. A
			// dangling link is a missing pack.
			if fi, err = os.Stat(filepath.Join(d.path, e.Name())); errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("list packs %s: %w", d.path, err)
		}
		out[uint32(n)] = fi.Size()
	}
	return out, nil
}

// Acquire returns the read descriptor of a pack, opening it if needed, and
// keeps it open until Release. Every Acquire needs exactly one Release.
func (d *Dir) Acquire(pack uint32) (*PackFile, error) {
	d.mu.Lock()
	if pf, err := d.acquireLocked(pack); pf != nil || err != nil {
		d.mu.Unlock()
		return pf, err
	}
	removals := d.removals
	d.mu.Unlock()
	// Open without the lock, so that one slow open does not hold up
	// readers of other packs.
	f, err := os.Open(d.Path(pack))
	if isFdLimit(err) {
		// Out of descriptors: give back every idle one and try again.
		d.mu.Lock()
		d.trimLocked(0)
		d.mu.Unlock()
		f, err = os.Open(d.Path(pack))
	}
	if err != nil {
		return nil, fmt.Errorf("open pack: %w", err)
	}
	// Files are read mostly front to back: a larger readahead window
	// serves cold sequential reads from fewer, larger disk requests.
	adviseSequential(f)
	d.mu.Lock()
	defer d.mu.Unlock()
	if pf, err := d.acquireLocked(pack); pf != nil || err != nil {
		f.Close() // opened meanwhile by another reader, or d closed
		return pf, err
	}
	pf := &PackFile{d: d, pack: pack, f: f, refs: 1}
	d.open++
	if d.removals != removals {
		// A pack was removed while this one was being opened, maybe this
		// one: serve this caller, but keep the descriptor for no one else.
		pf.detached = true
		return pf, nil
	}
	d.files[pack] = pf
	d.trimLocked(d.maxOpen)
	return pf, nil
}

// acquireLocked takes a reference on the pack's open descriptor, if there
// is one. Called with d.mu held.
func (d *Dir) acquireLocked(pack uint32) (*PackFile, error) {
	if d.closed {
		return nil, fmt.Errorf("open pack %s: %w", d.Path(pack), fs.ErrClosed)
	}
	pf := d.files[pack]
	if pf == nil {
		return nil, nil
	}
	if pf.refs == 0 {
		d.idle.Remove(pf.elem)
		pf.elem = nil
	}
	pf.refs++
	return pf, nil
}

// trimLocked closes the least recently used idle descriptors until at
// most max are open or none is idle. Called with d.mu held.
func (d *Dir) trimLocked(max int) {
	for d.open > max {
		e := d.idle.Back()
		if e == nil {
			return
		}
		pf := e.Value.(*PackFile)
		d.idle.Remove(e)
		pf.elem = nil
		delete(d.files, pf.pack)
		d.closeLocked(pf)
	}
}

// closeLocked closes a descriptor that no one holds and that is no longer
// in d.files or d.idle. Called with d.mu held.
func (d *Dir) closeLocked(pf *PackFile) {
	pf.f.Close() // read-only: nothing to lose
	pf.f = nil
	d.open--
}

// isFdLimit reports whether err is the process's (EMFILE) or the system's
// (ENFILE) descriptor limit.
func isFdLimit(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// OpenFiles is the number of pack read descriptors open now.
func (d *Dir) OpenFiles() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open
}

// File is the descriptor, for reads and splices until Release. Do not
// close it.
func (pf *PackFile) File() *os.File { return pf.f }

// Pack is the pack the descriptor reads.
func (pf *PackFile) Pack() uint32 { return pf.pack }

// Release gives back a reference taken by Acquire. The descriptor must not
// be used afterwards: once no one holds it, it may be closed and its
// number reused.
func (pf *PackFile) Release() {
	d := pf.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if pf.refs <= 0 {
		panic(fmt.Sprintf("blockstore: release of pack %d's descriptor that is not held", pf.pack))
	}
	pf.refs--
	if pf.refs > 0 {
		return
	}
	if pf.detached {
		d.closeLocked(pf)
		return
	}
	pf.elem = d.idle.PushFront(pf)
	d.trimLocked(d.maxOpen)
}

// detachLocked takes a pack's descriptor out of d.files: closed now if
// idle, at its last Release otherwise. Called with d.mu held.
func (d *Dir) detachLocked(pf *PackFile) {
	delete(d.files, pf.pack)
	if pf.refs > 0 {
		pf.detached = true
		return
	}
	d.idle.Remove(pf.elem)
	pf.elem = nil
	d.closeLocked(pf)
}

// ReadAt reads len(p) bytes of the chunk at loc, starting off bytes into the
// chunk. It keeps the io.ReaderAt contract: n < len(p) only with an error.
// It does not verify; see Verify.
func (d *Dir) ReadAt(p []byte, loc Loc, off int64) (int, error) {
	if off < 0 || off > loc.Len || int64(len(p)) > loc.Len-off {
		return 0, fmt.Errorf("read %s: range [%d,+%d) outside the %d-byte chunk", d.Path(loc.Pack), off, len(p), loc.Len)
	}
	pf, err := d.Acquire(loc.Pack)
	if err != nil {
		return 0, err
	}
	n, err := pf.f.ReadAt(p, loc.Off+off)
	pf.Release()
	if n == len(p) {
		return n, nil
	}
	if err == io.EOF {
		err = ErrShort
	}
	return n, fmt.Errorf("read %s at %d: %w", d.Path(loc.Pack), loc.Off+off, err)
}

// ReadChunk reads a whole chunk into p (which must hold loc.Len bytes) and,
// if verify is set, checks it against id. A mismatch is a *ChunkError
// wrapping ErrCorrupt; wrong bytes are never returned silently.
func (d *Dir) ReadChunk(p []byte, id ID, loc Loc, verify bool) error {
	if _, err := d.ReadAt(p[:loc.Len], loc, 0); err != nil {
		return &ChunkError{Pack: d.Path(loc.Pack), ID: id, Loc: loc, Err: err}
	}
	if verify && Sum(p[:loc.Len]) != id {
		return &ChunkError{Pack: d.Path(loc.Pack), ID: id, Loc: loc, Err: ErrCorrupt}
	}
	return nil
}

// Punch frees the disk space of dead ranges of a pack (fallocate
// PUNCH_HOLE), keeping its size so that other chunks keep their offsets.
// The bytes read as zeros afterwards. Ranges that touch are punched as one:
// a filesystem frees only the pages a punch covers whole, so chunks at
// offsets that are not page multiples (in a pack shared by many files)
// would each free nothing.
func (d *Dir) Punch(pack uint32, locs []Loc) error {
	f, err := os.OpenFile(d.Path(pack), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("punch %s: %w", d.Path(pack), err)
	}
	defer f.Close()
	locs = slices.Clone(locs)
	sort.Slice(locs, func(i, j int) bool { return locs[i].Off < locs[j].Off })
	merged := locs[:0]
	for _, l := range locs {
		if k := len(merged) - 1; k >= 0 && merged[k].End() >= l.Off {
			merged[k].Len = max(merged[k].End(), l.End()) - merged[k].Off
			continue
		}
		merged = append(merged, l)
	}
	for _, l := range merged {
		if err := punchHole(f, l.Off, l.Len); err != nil {
			return fmt.Errorf("punch %s [%d,+%d): %w", d.Path(pack), l.Off, l.Len, err)
		}
	}
	return nil
}

// Remove deletes a pack file that holds nothing live. A reader that still
// holds its descriptor keeps reading the removed file until it releases it.
// The file is unlinked under d.mu, so that a descriptor being opened
// meanwhile is not kept (see removals).
func (d *Dir) Remove(pack uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removals++
	if pf, ok := d.files[pack]; ok {
		d.detachLocked(pf)
	}
	if err := os.Remove(d.Path(pack)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pack: %w", err)
	}
	return nil
}

// Truncate cuts a pack to its committed length, dropping bytes that no
// committed manifest refers to (the tail of a crashed ingest).
func (d *Dir) Truncate(pack uint32, size int64) error {
	if err := os.Truncate(d.Path(pack), size); err != nil {
		return fmt.Errorf("truncate pack: %w", err)
	}
	return nil
}

// Close closes every idle descriptor; those still in use are closed when
// released. Acquire fails afterwards.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, pf := range d.files {
		d.detachLocked(pf)
	}
	return nil
}
