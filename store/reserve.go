package store

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// A full disk must not wedge the store: removing files is how a user makes
// room, so it must always be possible. A removal writes the index first
// (bbolt writes the changed pages into free pages of its file, and grows
// the file when it has too few) and frees the chunks' space after. The
// index allocates the space it grows into (manifest.DB), but the disk can
// fill before it does, or a removal can need more pages than the index has
// free. So the store keeps a reserve: STORE/reserve, a file of allocated
// bytes. A transaction that frees space and fails with ENOSPC gives the
// reserve up and runs again; the reserve is made again once removals have
// made room, when the store opens, and before writes, so that writes hit
// ENOSPC while the reserve is still there.

// reserveName is the reserve's file name in the store directory.
const reserveName = "reserve"

// Reserve sizes: 1/32 of the filesystem, within these bounds, unless
// Options.Reserve says otherwise. A removal on a full disk may need a new
// journal segment (1/64 of the filesystem, 256 KiB to 64 MiB: journal.go)
// and pages for bbolt's checkpoint: the reserve holds room for both.
const (
	minReserve = 512 << 10
	maxReserve = 128 << 20
)

// reserve is the store's disk space reserve. Its methods are safe for
// concurrent use.
type reserve struct {
	path string
	size int64
	log  *slog.Logger

	mu   sync.Mutex  // serialises fill and release
	held atomic.Bool // the file is in place, allocated in full
}

func newReserve(dir string, size int64, log *slog.Logger) *reserve {
	if size <= 0 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			size = int64(st.Blocks) * int64(st.Bsize) / 32
		}
		size = min(max(size, minReserve), maxReserve)
	}
	return &reserve{path: filepath.Join(dir, reserveName), size: size, log: log}
}

// fill makes the reserve whole, with as much as the filesystem has free:
// a removal that frees less than the reserve gives what it frees to the
// reserve, before another writer takes it (the next removal on a full
// disk needs it). It costs nothing while the reserve is whole.
func (r *reserve) fill() {
	if r.held.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held.Load() {
		return
	}
	f, err := os.OpenFile(r.path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		r.log.Debug("cannot make the disk space reserve", "path", r.path, "err", err)
		return
	}
	defer f.Close()
	have := allocatedBytes(f)
	if have >= r.size {
		r.held.Store(true)
		return
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(r.path), &st); err != nil {
		return
	}
	bs := int64(st.Bsize)
	// What is free, less a little for the file's own metadata, in whole
	// blocks (the reserve is allocated from its start, without holes).
	free := (int64(st.Bavail) - int64(st.Bavail)/64 - 4) * bs
	n := min(r.size, have/bs*bs+max(free, 0))
	if n <= have {
		return // no room: a later removal or open tries again
	}
	if err := allocateReserve(f, n); err != nil {
		r.log.Debug("cannot make the disk space reserve", "path", r.path, "bytes", n, "err", err)
		return
	}
	if n == r.size {
		r.log.Info("disk space reserve in place, for removals on a full disk", "path", r.path, "bytes", r.size)
		r.held.Store(true)
	}
}

// allocatedBytes is the disk space a file holds.
func allocatedBytes(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

// allocateReserve allocates n bytes to the reserve file f: with fallocate,
// or by writing zeros where the filesystem cannot allocate ahead.
func allocateReserve(f *os.File, n int64) error {
	err := blockstore.Allocate(f, 0, n)
	if !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	zeros := make([]byte, min(n, 1<<20))
	for off := int64(0); off < n; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(n-off, int64(len(zeros)))], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// release gives the reserve's space up, for op, which failed with cause
// (ENOSPC). It reports whether it freed anything: only then is op worth
// running again.
func (r *reserve) release(op string, cause error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held.Store(false)
	f, err := os.OpenFile(r.path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		r.log.Error("release the disk space reserve", "path", r.path, "err", err)
		return false
	}
	defer f.Close()
	have := allocatedBytes(f)
	if err := f.Truncate(0); err != nil {
		r.log.Error("release the disk space reserve", "path", r.path, "err", err)
		return false
	}
	if have == 0 {
		return false
	}
	r.log.Warn("disk full: released the disk space reserve so that a removal can proceed; it is made again once there is room",
		"op", op, "bytes", have, "cause", cause)
	return true
}

// freeing runs fn, a write transaction that frees space (a removal, a
// rename over a file, the release of an orphan), for op. On a full disk
// it can fail with ENOSPC; then the reserve is given up and fn runs again.
// fn must be safe to run twice.
func (s *Store) freeing(op string, fn func(*manifest.Tx) error) error {
	seq, err := s.freeingSeq(op, fn)
	if err != nil {
		return err
	}
	return s.written(seq)
}

// freeingSeq is freeing, returning the journal sequence number that
// makes the transaction durable.
func (s *Store) freeingSeq(op string, fn func(*manifest.Tx) error) (uint64, error) {
	seq, err := s.updateReleasingSeq(fn)
	if errors.Is(err, syscall.ENOSPC) && s.reserve.release(op, err) {
		seq, err = s.updateReleasingSeq(fn)
	}
	return seq, err
}
