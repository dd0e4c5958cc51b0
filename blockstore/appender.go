package blockstore

import (
	"bufio"
	"fmt"
	"os"
)

// Appender appends chunks to one pack. Each concurrent ingest uses its own
// Appender on its own pack, so that a snapshot's new chunks sit together on
// disk and no two writers share a file offset. It is not safe for
// concurrent use.
type Appender struct {
	d    *Dir
	pack uint32
	f    *os.File
	w    *bufio.Writer
	end  int64 // offset of the next chunk
}

// appendBuffer batches small chunks into large writes.
const appendBuffer = 4 << 20

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
	return &Appender{d: d, pack: pack, f: f, w: bufio.NewWriterSize(&offsetWriter{f, committed}, appendBuffer), end: committed}, nil
}

// offsetWriter writes sequentially with pwrite, so the descriptor's own
// offset never matters.
type offsetWriter struct {
	f   *os.File
	off int64
}

func (o *offsetWriter) Write(p []byte) (int, error) {
	n, err := o.f.WriteAt(p, o.off)
	o.off += int64(n)
	return n, err
}

// Pack is the pack this Appender writes.
func (a *Appender) Pack() uint32 { return a.pack }

// Size is the pack's length including chunks not yet synced.
func (a *Appender) Size() int64 { return a.end }

// Append adds b as one chunk and returns its location. The bytes are not
// durable until Sync returns.
func (a *Appender) Append(b []byte) (Loc, error) {
	loc := Loc{Pack: a.pack, Off: a.end, Len: int64(len(b))}
	if _, err := a.w.Write(b); err != nil {
		return Loc{}, fmt.Errorf("append to %s: %w", a.d.Path(a.pack), err)
	}
	a.end += int64(len(b))
	return loc, nil
}

// Sync makes every appended chunk durable: after it returns, a manifest may
// refer to them.
func (a *Appender) Sync() error {
	if err := a.w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", a.d.Path(a.pack), err)
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", a.d.Path(a.pack), err)
	}
	return nil
}

// Rollback discards everything appended since the pack was committed at
// size committed, for an ingest that will not commit.
func (a *Appender) Rollback(committed int64) error {
	a.w.Reset(&offsetWriter{a.f, committed})
	a.end = committed
	if err := a.f.Truncate(committed); err != nil {
		return fmt.Errorf("roll back %s: %w", a.d.Path(a.pack), err)
	}
	return nil
}

// Close closes the pack file without syncing.
func (a *Appender) Close() error { return a.f.Close() }
