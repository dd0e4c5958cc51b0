// Package fdlimit reports running out of file descriptors: the process's
// RLIMIT_NOFILE and how many descriptors it has open, logged once per kind
// of failure (EMFILE: this process's limit; ENFILE: the system's), so that
// a daemon that runs out says why once instead of in every failing request
// or never.
package fdlimit

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Limit is the process's RLIMIT_NOFILE.
type Limit struct {
	Soft, Hard uint64
}

// Current returns the process's RLIMIT_NOFILE.
func Current() (Limit, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return Limit{}, err
	}
	return Limit{Soft: uint64(rl.Cur), Hard: uint64(rl.Max)}, nil
}

// Open counts the process's open descriptors (Linux: /proc/self/fd), or
// returns -1 where it cannot (with no descriptor left to read the
// directory, for one; a Reporter keeps its own open for that).
func Open() int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer d.Close()
	return count(d)
}

// count counts the entries of the open /proc/self/fd directory d, less d
// itself.
func count(d *os.File) int {
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return -1
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names) - 1
}

// Reporter logs the first EMFILE and the first ENFILE it is shown. Make
// one with NewReporter; it is safe for concurrent use.
type Reporter struct {
	log    *slog.Logger
	what   string // who ran out, for the message
	emfile atomic.Bool
	enfile atomic.Bool

	mu    sync.Mutex // guards fdDir's position
	fdDir *os.File   // /proc/self/fd, open ahead: when it matters there is no descriptor left to open it
}

// NewReporter returns a Reporter logging to log; what names the part of
// the daemon (e.g. "filesystem", "control socket"). It keeps one
// descriptor open for the life of the process.
func NewReporter(log *slog.Logger, what string) *Reporter {
	r := &Reporter{log: log, what: what}
	r.fdDir, _ = os.Open("/proc/self/fd")
	return r
}

// Note logs err with the descriptor limit and count if it is the first
// EMFILE or ENFILE seen, and reports whether err is either.
func (r *Reporter) Note(err error) bool {
	var seen *atomic.Bool
	switch {
	case err == nil:
		return false
	case errors.Is(err, syscall.EMFILE):
		seen = &r.emfile
	case errors.Is(err, syscall.ENFILE):
		seen = &r.enfile
	default:
		return false
	}
	if seen.Swap(true) {
		return true
	}
	msg := r.what + ": out of file descriptors (the process's RLIMIT_NOFILE); logged once"
	if errors.Is(err, syscall.ENFILE) {
		msg = r.what + ": the system is out of file descriptors (fs.file-max); logged once"
	}
	open := -1
	if r.fdDir != nil {
		r.mu.Lock()
		open = count(r.fdDir)
		r.mu.Unlock()
	}
	args := []any{"err", err, "open_fds", open}
	if lim, lerr := Current(); lerr == nil {
		args = append(args, "nofile_soft", lim.Soft, "nofile_hard", lim.Hard)
	}
	r.log.Error(msg, args...)
	return true
}
