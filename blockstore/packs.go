package blockstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// DefaultPackBytes is the size at which an Appender moves to a new pack.
const DefaultPackBytes = 1 << 30

// Dir is the local implementation: packs in one directory, named
// NNNNNN.pack. It is safe for concurrent use. Readers share one read-only
// descriptor per pack, opened on first use and closed by Close.
type Dir struct {
	path string

	mu    sync.Mutex          // guards files
	files map[uint32]*os.File // read-only descriptors, by pack
}

// Open opens (creating if needed) the pack directory.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("open packs %s: %w", path, err)
	}
	return &Dir{path: path, files: map[uint32]*os.File{}}, nil
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
		if err != nil {
			return nil, fmt.Errorf("list packs %s: %w", d.path, err)
		}
		out[uint32(n)] = fi.Size()
	}
	return out, nil
}

// File returns the shared read-only descriptor of a pack, for callers that
// splice from it. The descriptor belongs to d: callers must not close it,
// and must not use it after d.Close.
func (d *Dir) File(pack uint32) (*os.File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.files[pack]; ok {
		return f, nil
	}
	f, err := os.Open(d.Path(pack))
	if err != nil {
		return nil, err
	}
	// Files are read mostly front to back: a larger readahead window
	// serves cold sequential reads from fewer, larger disk requests.
	adviseSequential(f)
	d.files[pack] = f
	return f, nil
}

// ReadAt reads len(p) bytes of the chunk at loc, starting off bytes into the
// chunk. It keeps the io.ReaderAt contract: n < len(p) only with an error.
// It does not verify; see Verify.
func (d *Dir) ReadAt(p []byte, loc Loc, off int64) (int, error) {
	if off < 0 || off > loc.Len || int64(len(p)) > loc.Len-off {
		return 0, fmt.Errorf("read %s: range [%d,+%d) outside the %d-byte chunk", d.Path(loc.Pack), off, len(p), loc.Len)
	}
	f, err := d.File(loc.Pack)
	if err != nil {
		return 0, err
	}
	n, err := f.ReadAt(p, loc.Off+off)
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
// The bytes read as zeros afterwards.
func (d *Dir) Punch(pack uint32, locs []Loc) error {
	f, err := os.OpenFile(d.Path(pack), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("punch %s: %w", d.Path(pack), err)
	}
	defer f.Close()
	sort.Slice(locs, func(i, j int) bool { return locs[i].Off < locs[j].Off })
	for _, l := range locs {
		if err := punchHole(f, l.Off, l.Len); err != nil {
			return fmt.Errorf("punch %s [%d,+%d): %w", d.Path(pack), l.Off, l.Len, err)
		}
	}
	return nil
}

// Remove deletes a pack file that holds nothing live.
func (d *Dir) Remove(pack uint32) error {
	d.mu.Lock()
	if f, ok := d.files[pack]; ok {
		f.Close()
		delete(d.files, pack)
	}
	d.mu.Unlock()
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

// Close closes every shared descriptor.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	for k, f := range d.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		delete(d.files, k)
	}
	return first
}
