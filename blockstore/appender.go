package blockstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// Appender appends chunks to one pack. Space is reserved first (Reserve,
// TryReserve, which decide a chunk's location at once) and filled
// afterwards (WriteAt, CopyFrom), so that an ingest can hash the next bytes
// while earlier ones are being written.
//
// It is safe for concurrent use, so that several ingests can share one
// pack (small files would otherwise each make a pack of their own): each
// reservation is a range that no other reservation overlaps, and the
// writes that fill ranges are positioned writes, which need no lock.
// Which of the reserved ranges the index may call committed is the
// caller's protocol (see the store's shared packs).
type Appender struct {
	d    *Dir
	pack uint32
	f    *os.File
	mu   sync.Mutex
	end  int64 // offset of the next reservation; guarded by mu
}

// NewAppender opens pack for appending after its first committed bytes,
// creating it if needed and cutting off anything past committed (the
// unreferenced tail of an ingest that did not commit). The caller must make
// sure no other Appender has the same pack.
func (d *Dir) NewAppender(pack uint32, committed int64) (*Appender, error) {
	path := d.Path(pack)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open pack for append: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != committed {
		err = f.Truncate(committed)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open pack for append %s: %w", path, err)
	}
	return &Appender{d: d, pack: pack, f: f, end: committed}, nil
}

// Pack is the pack this Appender writes.
func (a *Appender) Pack() uint32 { return a.pack }

// Size is the pack's length including every reservation.
func (a *Appender) Size() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.end
}

// Reserve allocates n bytes at the end of the pack and returns their
// location; the caller fills them with WriteAt or CopyFrom before Sync.
func (a *Appender) Reserve(n int64) Loc {
	a.mu.Lock()
	defer a.mu.Unlock()
	loc := Loc{Pack: a.pack, Off: a.end, Len: n}
	a.end += n
	return loc
}

// TryReserve is Reserve if the pack stays within limit bytes, or is empty
// (a chunk larger than limit still needs a pack); otherwise it reserves
// nothing and reports false. The check and the reservation are one step,
// so that concurrent callers cannot together overfill the pack.
//
// after is the end of the caller's previous reservation in this pack (or
// -1). Unless the new range follows it directly, it starts at the next
// multiple of PageSize: the ranges of one writer then start on a page, so
// that punching them out once they are dead frees every page they fill
// whole, instead of none when chunks are a page long. The bytes skipped
// belong to no range.
func (a *Appender) TryReserve(n, limit, after int64) (Loc, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := a.end
	if start != after {
		start = (start + PageSize - 1) / PageSize * PageSize
	}
	if a.end > 0 && start+n > limit {
		return Loc{}, false
	}
	loc := Loc{Pack: a.pack, Off: start, Len: n}
	a.end = start + n
	return loc, true
}

// PageSize is the unit in which filesystems allocate and punch pack space.
const PageSize = 4096

// WriteAt fills reserved bytes at pack offset off.
func (a *Appender) WriteAt(b []byte, off int64) error {
	if _, err := a.f.WriteAt(b, off); err != nil {
		return a.wrap("write", err)
	}
	return nil
}

// CopyFrom fills n reserved bytes at pack offset off from src at srcOff,
// inside the kernel where the platform can (copy_file_range), so that new
// bytes are not copied through user space.
func (a *Appender) CopyFrom(src *os.File, srcOff, off, n int64) error {
	if err := copyRange(src, srcOff, a.f, off, n); err != nil {
		return a.wrap("copy into", err)
	}
	return nil
}

// ReadAt reads back bytes written at pack offset off (from the page
// cache, before Sync), for a caller that journals them instead.
func (a *Appender) ReadAt(b []byte, off int64) error {
	if _, err := a.f.ReadAt(b, off); err != nil {
		return a.wrap("read back", err)
	}
	return nil
}

// Append reserves room for b and writes it: one chunk, one write.
func (a *Appender) Append(b []byte) (Loc, error) {
	loc := a.Reserve(int64(len(b)))
	return loc, a.WriteAt(b, loc.Off)
}

// Sync makes every written chunk durable: after it returns, a manifest may
// refer to them.
func (a *Appender) Sync() error {
	if err := a.f.Sync(); err != nil {
		return a.wrap("sync", err)
	}
	return nil
}

// Rollback discards everything appended since the pack was committed at
// size committed, for ingests that will not commit. The caller must make
// sure that no reservation past committed is still in use.
func (a *Appender) Rollback(committed int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.end = committed
	if err := a.f.Truncate(committed); err != nil {
		return a.wrap("roll back", err)
	}
	return nil
}

// Close closes the pack file without syncing.
func (a *Appender) Close() error { return a.f.Close() }

// wrap names the pack in err unless the error already does (an
// *fs.PathError from the write itself).
func (a *Appender) wrap(op string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%s %s: %w", op, a.d.Path(a.pack), err)
}

// StartWriteback asks the kernel to begin writing [off, off+n) of the pack
// to disk now, without waiting, so that the final Sync finds most bytes
// already written instead of writing the whole ingest at once. It is only
// a hint: errors are ignored and Sync remains the durability point.
func (a *Appender) StartWriteback(off, n int64) { startWriteback(a.f, off, n) }
