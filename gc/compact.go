package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kvfs/kvfs/store"
)

// Compaction (store.Compact) rewrites packs whose dead fraction passes a
// threshold and removes packs with nothing live: it is what reclaims the
// space of released chunks where the filesystem cannot punch holes, and
// what keeps packs from becoming confetti where it can. The daemon runs
// it in the background (kvfs mount --compact-interval); kvfs gc runs it
// on demand, offline (Compact here) or through the daemon's control
// socket.

// CompactOptions configure Compact.
type CompactOptions struct {
	store.CompactOptions
	// LockTimeout bounds the wait for the store's lock; 0 means one
	// second.
	LockTimeout time.Duration
	// Before, if set, is called with the opened store before it is
	// compacted (kvfs gc applies the store's capacity there, with
	// Evict, so that compaction reclaims what eviction released).
	Before func(s *store.Store) error
}

// Compact compacts the store in dir offline: it opens the store (so a
// crash is recovered first), which takes its lock, so a mounted store is
// refused (kvfs gc goes through the daemon's socket then).
func Compact(ctx context.Context, dir string, opts CompactOptions) (*store.CompactResult, error) {
	s, err := store.Open(dir, store.Options{LockTimeout: opts.LockTimeout})
	if errors.Is(err, store.ErrInUse) {
		return nil, fmt.Errorf("gc %s: the store is in use by a daemon that did not answer on its socket: %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", dir, err)
	}
	var res *store.CompactResult
	if opts.Before != nil {
		err = opts.Before(s)
	}
	if err == nil {
		res, err = s.Compact(ctx, opts.CompactOptions)
	}
	if cerr := s.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("gc %s: %w", dir, cerr)
	}
	return res, err
}

// PrintCompact writes what a compaction did (or, dry, would do) for an
// operator.
func PrintCompact(out io.Writer, dir string, res *store.CompactResult, dry bool) {
	if dry {
		fmt.Fprintf(out, "%s: dry run: would rewrite %d pack(s) (%d chunk(s), %s to copy) into %d new pack(s), remove %d pack(s), and reclaim about %s (packs use %s on disk)\n",
			dir, res.PacksRewritten, res.ChunksMoved, Bytes(res.BytesCopied), res.PacksCreated, res.PacksDeleted, Bytes(res.BytesReclaimed), Bytes(res.DiskBefore))
	} else {
		fmt.Fprintf(out, "%s: rewrote %d pack(s) (%d chunk(s), %s copied) into %d new pack(s), removed %d pack(s); packs use %s on disk, %s before: %s reclaimed\n",
			dir, res.PacksRewritten, res.ChunksMoved, Bytes(res.BytesCopied), res.PacksCreated, res.PacksDeleted, Bytes(res.DiskAfter), Bytes(res.DiskBefore), Bytes(res.BytesReclaimed))
	}
	if res.PacksSkipped > 0 {
		fmt.Fprintf(out, "%s: %d pack(s) skipped: in use by writers (a later run takes them)\n", dir, res.PacksSkipped)
	}
}

// Bytes formats n bytes for people: 1.5 MiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit || f <= -unit {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[i])
}
