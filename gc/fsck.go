package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
)

// Exit statuses of kvfs fsck (README.md and docs/MOUNT.md list them).
const (
	StatusClean    = 0 // no problem, no damaged file
	StatusProblems = 1 // problems found, not repaired (no --repair)
	StatusDamaged  = 3 // files have lost bytes (marked damaged), or a problem could not be repaired
	StatusRepaired = 5 // problems found and all repaired, no byte lost
	StatusFailed   = 8 // fsck could not run: the store is in use, or an I/O error
)

// FsckOptions configure Fsck.
type FsckOptions struct {
	Verify bool // read every chunk and check its hash
	Repair bool // fix what can be fixed, mark lost bytes damaged
	// Progress, if set, is called as chunks are verified.
	Progress func(done, total int64)
	// LockTimeout bounds the wait for the store's lock; 0 means one
	// second.
	LockTimeout time.Duration
}

// Fsck checks the store in dir, offline: it opens the store the normal
// way (so a journal is replayed and a crash recovered first), which takes
// its lock, so a mounted store is refused. It writes one line per problem
// to out, naming the chunk, its pack and offset, and the files (and file
// offsets) that list it, then, with Repair, what it changed. It returns
// the exit status; an error only when it could not check at all.
func Fsck(ctx context.Context, dir string, opts FsckOptions, out io.Writer) (int, error) {
	s, err := store.Open(dir, store.Options{LockTimeout: opts.LockTimeout})
	if errors.Is(err, store.ErrInUse) {
		return StatusFailed, fmt.Errorf("fsck %s: the store is in use (mounted?): unmount it and run kvfs fsck again: %w", dir, err)
	}
	if err != nil {
		return StatusFailed, fmt.Errorf("fsck %s: %w", dir, err)
	}
	defer s.Close()
	return FsckStore(ctx, s, dir, opts, out)
}

// FsckLive checks the store a mounted daemon has open (kvfs fsck through
// its control socket): writes and compaction go on, and only problems that
// a second look confirms are reported (store.CheckOptions.Live). Repair is
// refused: it rewrites manifests and refcounts in one sweep that live
// writes would race, and the files it marks damaged would change under
// open handles; the user unmounts and runs kvfs fsck --repair.
func FsckLive(ctx context.Context, s *store.Store, opts FsckOptions, out io.Writer) (int, error) {
	if opts.Repair {
		return StatusFailed, fmt.Errorf("fsck %s: --repair is not done while the store is mounted: unmount it and run kvfs fsck --repair %s (kvfs fsck without --repair checks a mounted store)", s.Dir(), s.Dir())
	}
	return fsckStore(ctx, s, s.Dir(), opts, true, out)
}

// FsckStore is Fsck on an open store that nothing else uses.
func FsckStore(ctx context.Context, s *store.Store, dir string, opts FsckOptions, out io.Writer) (int, error) {
	return fsckStore(ctx, s, dir, opts, false, out)
}

func fsckStore(ctx context.Context, s *store.Store, dir string, opts FsckOptions, live bool, out io.Writer) (int, error) {
	problems, err := s.Problems(ctx, store.CheckOptions{Verify: opts.Verify, Progress: opts.Progress, Live: live})
	if err != nil {
		return StatusFailed, err
	}
	damaged, err := report(s, problems, out)
	if err != nil {
		return StatusFailed, err
	}
	if len(problems) == 0 {
		if len(damaged) > 0 {
			return StatusDamaged, nil
		}
		fmt.Fprintf(out, "%s: clean\n", dir)
		return StatusClean, nil
	}
	if !opts.Repair {
		fmt.Fprintf(out, "%s: %d problem(s); run kvfs fsck --repair to fix them\n", dir, len(problems))
		return StatusProblems, nil
	}
	res, err := s.Repair(ctx, problems)
	if err != nil {
		return StatusFailed, err
	}
	fmt.Fprintf(out, "repaired: %d refcount(s), %d lost chunk(s) dropped, %d pack record(s), %d stray pack file(s) removed, %d other\n",
		res.Refcounts, res.Dropped, res.Packs, res.Removed, res.Other)
	for _, d := range res.Damaged {
		fmt.Fprintf(out, "marked damaged: %s: bytes %s read as EIO\n", d.File, store.FormatRanges(d.Ranges))
	}
	// What Repair could not fix shows in a second check (the hashes of
	// the chunks left were verified by the first).
	left, err := s.Problems(ctx, store.CheckOptions{})
	if err != nil {
		return StatusFailed, err
	}
	for _, p := range left {
		fmt.Fprintf(out, "not repaired: %s\n", p.Msg)
	}
	if len(left) > 0 || len(res.Damaged) > 0 || len(damaged) > 0 {
		return StatusDamaged, nil
	}
	return StatusRepaired, nil
}

// report writes each problem with the files that list its chunk, and the
// files marked damaged before; it returns those.
func report(s *store.Store, problems []store.Problem, out io.Writer) ([]store.DamagedFile, error) {
	var ids []store.Problem
	for _, p := range problems {
		if p.Kind == store.ProblemRefs || p.Kind == store.ProblemLost {
			ids = append(ids, p)
		}
	}
	chunks := make([]blockstore.ID, len(ids))
	for i, p := range ids {
		chunks[i] = p.Chunk
	}
	uses, damaged, err := s.Uses(chunks)
	if err != nil {
		return nil, err
	}
	for _, p := range problems {
		fmt.Fprintf(out, "%s: %s\n", kindName[p.Kind], p.Msg)
		if p.Kind != store.ProblemRefs && p.Kind != store.ProblemLost {
			continue
		}
		for _, u := range uses[p.Chunk] {
			fmt.Fprintf(out, "  in %s at file offset %d (chunk %s, pack %d offset %d)\n", u.File, u.Off, p.Chunk, p.Loc.Pack, p.Loc.Off)
		}
	}
	for _, d := range damaged {
		fmt.Fprintf(out, "damaged (marked): %s: bytes %s read as EIO\n", d.File, store.FormatRanges(d.Ranges))
	}
	return damaged, nil
}

var kindName = map[store.ProblemKind]string{
	store.ProblemIndex:       "index",
	store.ProblemRefs:        "refcount",
	store.ProblemLost:        "lost",
	store.ProblemPack:        "pack",
	store.ProblemStrayPack:   "stray pack",
	store.ProblemBlobPins:    "blob pins",
	store.ProblemStrayXattrs: "stray xattrs",
}
