package journal

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	segSuffix = ".seg"
	tmpSuffix = ".seg.tmp"
	// zeroChunk bounds the buffer used to write a segment's zeros.
	zeroChunk = 1 << 20
)

// segment is one open segment file.
type segment struct {
	f    *os.File
	path string
	num  int   // the file's number: NNNNNN.seg
	size int64 // file size; records never pass it

	// Fields below describe the segment's current life; valid while it
	// is in the live chain.
	epoch    uint64
	firstSeq uint64
	end      int64 // offset after the last record written (or recovered)
	dirty    bool  // written since its last fdatasync
}

func segName(num int) string { return fmt.Sprintf("%06d%s", num, segSuffix) }

// parseSegName returns the number of a segment file name.
func parseSegName(name string) (int, bool) {
	s, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(s) < 6 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || segName(n) != name {
		return 0, false
	}
	return n, true
}

// newEpoch draws a segment epoch. crypto/rand: two lives of a segment, or
// two journals, must not share one by accident; zero is avoided so that a
// zeroed record can never match.
func newEpoch() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if e := binary.LittleEndian.Uint64(b[:]); e != 0 {
			return e
		}
	}
}

// createSegment makes a new free segment of size bytes: written under a
// temporary name, zero-filled, fsynced, then renamed into place and the
// directory fsynced, so a crash leaves either no segment or a whole one.
func createSegment(dir string, num int, size int64, sync func(*os.File) error) (*segment, error) {
	final := filepath.Join(dir, segName(num))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: create segment: %w", err)
	}
	s := &segment{f: f, path: tmp, num: num}
	if err := s.ensureSize(size, sync); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("journal: create segment: %w", err)
	}
	f.Close()
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	// Reopened under its final name, which errors from the *os.File carry.
	if s.f, err = os.OpenFile(final, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("journal: create segment: %w", err)
	}
	s.path = final
	return s, nil
}

// ensureSize grows the file to at least size bytes by writing zeros and
// fsyncs it. The zeros are written, not only allocated: on ext4 a write
// into an allocated but unwritten extent converts the extent, a metadata
// change that fdatasync must then journal; into written blocks it is a
// pure data write.
func (s *segment) ensureSize(size int64, sync func(*os.File) error) error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: stat segment: %w", err)
	}
	s.size = st.Size()
	if s.size >= size {
		return nil
	}
	if err := fallocate(s.f, s.size, size-s.size); err != nil {
		return &fs.PathError{Op: "fallocate", Path: s.path, Err: err}
	}
	zeros := make([]byte, min(zeroChunk, size-s.size))
	for off := s.size; off < size; {
		n := min(int64(len(zeros)), size-off)
		if _, err := s.f.WriteAt(zeros[:n], off); err != nil {
			return fmt.Errorf("journal: zero segment: %w", err)
		}
		off += n
	}
	// fdatasync suffices: the new size is needed to read the data back.
	if err := sync(s.f); err != nil {
		return &fs.PathError{Op: "fdatasync", Path: s.path, Err: err}
	}
	s.size = size
	return nil
}

// openSegments opens every NNNNNN.seg in dir, in number order, and removes
// leftovers of segment creations a crash interrupted.
func openSegments(dir string) ([]*segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: open: %w", err)
	}
	var segs []*segment
	for _, e := range ents { // ReadDir sorts by name, so by number
		name := e.Name()
		if strings.HasSuffix(name, tmpSuffix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				closeAll(segs)
				return nil, fmt.Errorf("journal: remove leftover: %w", err)
			}
			continue
		}
		num, ok := parseSegName(name)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			closeAll(segs)
			return nil, fmt.Errorf("journal: open segment: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			closeAll(segs)
			return nil, fmt.Errorf("journal: stat segment: %w", err)
		}
		segs = append(segs, &segment{f: f, path: p, num: num, size: st.Size()})
	}
	return segs, nil
}

func closeAll(segs []*segment) {
	for _, s := range segs {
		s.f.Close()
	}
}

// writeHeader starts a new life of the segment: a fresh epoch and the
// sequence number of its first record.
func (s *segment) writeHeader(h segHeader) error {
	if _, err := s.f.WriteAt(h.marshal(), 0); err != nil {
		return fmt.Errorf("journal: write segment header: %w", err)
	}
	s.epoch, s.firstSeq, s.end, s.dirty = h.epoch, h.firstSeq, segHeaderSize, true
	return nil
}

// syncDir fsyncs a directory (always fsync, not Options.SyncFile: the
// entries are metadata).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}
