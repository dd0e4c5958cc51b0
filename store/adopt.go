package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// A file written through the mount is spooled first. When most of a large
// file is new, writing its new chunks into a pack would copy most of it
// again; the spool becomes the pack instead (docs/DESIGN.md, write path 6): it
// is renamed into packs/, its new chunks stay where they are, and
// everything else — duplicate chunks, zero runs — is punched out.
// Otherwise its new chunks are copied into a shared pack, as from any other
// source. Small files are always copied: a pack of its own for each would
// make the number of packs grow with the files (a test suite's run left
// 20,034 packs for 1.2 MiB of live data), and adopting costs a pack
// allocation, a rename and a directory sync where a copy of a small file
// costs less than its fsync.

// adoptShare is the share of new bytes from which a spool is adopted.
const adoptShare = 0.5

// DefaultAdoptMinBytes is the smallest spool adopted as a pack. An
// adopted pack then holds at least as much as a quarter of a shared pack
// (blockstore.DefaultPackBytes), so packs stay fewer than the stored bytes
// divided by 16 MiB, plus those open for appending.
const DefaultAdoptMinBytes = 16 << 20

// copyRunBytes bounds a run of new chunks copied at once: one reservation,
// so a run needs room in one pack, and a pack moves on before it is full
// by less than a run.
const copyRunBytes = 1 << 20

// CommitOptions qualify CommitIno.
type CommitOptions struct {
	// Mtime and Ctime are the new version's modification and status
	// change times: those of the writes it holds, or of a utimensat
	// after them (so that a time set on an open file survives its
	// commit, as cp -p and tar need). Zero means now.
	Mtime, Ctime time.Time
	// Adopt allows the store to take src, which must be an *os.File in
	// the store's spool directory, as a pack. If it does (PutStats.Adopted),
	// the file has been moved and is no longer the caller's to write.
	Adopt bool
	// Hold makes the commit hold the new inode, as Store.Hold does, in
	// the transaction that creates it, so that no release can come
	// between the commit and the hold. The caller releases it with
	// Unhold.
	Hold bool
	// Unhold and Close drop, once the commit succeeds, the caller's hold
	// (Store.Hold) and open files (Store.OpenIno; Close on them does
	// nothing afterwards) of the version the commit replaces, as if the
	// caller did right after it. Not after: in the commit's transaction,
	// so that a version that nothing else pins is released there and the
	// chunks both versions list keep their counts (a reference moves from
	// one manifest to the other), instead of one transaction adding a
	// reference to every chunk of the file and another, at the release of
	// the orphaned version, taking it back. A small change to a large file
	// then touches the records of its changed chunks only. A failed commit
	// leaves them held and open.
	Unhold bool
	Close  []*File
}

// place puts the new chunks of an adoptable source: in the file itself,
// adopted as a pack, or copied into the ingest's pack.
func (in *ingest) place() error {
	if in.adoptable() {
		return in.adoptSpool()
	}
	var runs []copyRun
	limit := min(copyRunBytes, in.s.packBytes)
	for i := 0; i < len(in.fresh); {
		// Copy runs of chunks that are contiguous in the source at once,
		// into one reserved range (another ingest may reserve between
		// two reservations of this one). Short runs apart in the source
		// (a transposed V's new tail of each channel run, a few KiB
		// between stored bytes) are gathered into one range: read one
		// by one, written at once, rather than a copy, a reservation
		// and a writeback hint each.
		var gather []copyRun // the runs gathered, by source offset
		var n int64
		j := i
		for j < len(in.fresh) {
			start, rn := in.fresh[j].off, in.fresh[j].n
			k := j + 1
			for ; k < len(in.fresh) && in.fresh[k].off == start+rn && rn+in.fresh[k].n <= limit; k++ {
				rn += in.fresh[k].n
			}
			if j > i && (rn >= gatherBelow || n+rn > limit) {
				break // a long run is copied on its own
			}
			gather = append(gather, copyRun{srcOff: start, n: rn})
			n += rn
			j = k
			if rn >= gatherBelow {
				break
			}
		}
		app, loc, err := in.reserve(n)
		if err != nil {
			return err
		}
		for off := loc.Off; i < j; i++ {
			c := in.fresh[i]
			in.states[c.id].written, in.states[c.id].loc = true, blockstore.Loc{Pack: loc.Pack, Off: off, Len: c.n}
			off += c.n
		}
		r := copyRun{app: app, srcOff: gather[0].srcOff, off: loc.Off, n: n}
		if len(gather) > 1 {
			r.parts = gather
		}
		runs = append(runs, r)
	}
	return in.copyRuns(runs)
}

// gatherBelow is the length under which runs of new chunks apart in the
// source are gathered into one write (place).
const gatherBelow = 64 << 10

// copyRun is a run of new chunks, contiguous in the source, and the range
// reserved for it; or, with parts, runs apart in the source gathered into
// one range.
type copyRun struct {
	app         *blockstore.Appender
	srcOff, off int64
	n           int64
	parts       []copyRun // srcOff and n of each
}

// copyRuns copies the runs into their packs, starting each run's
// writeback as soon as it is copied, so that the sync before the commit
// waits for less (issue 28: 0.26–0.31 s → 0.03–0.13 s of a 4 GiB
// snapshot's commit with 537 MB new), unless the journal carries the
// bytes (chunkAll's hint). One at a time: copies into one pack serialize
// on its inode's lock in the kernel, and eight at once burned eight cores
// to copy no faster.
func (in *ingest) copyRuns(runs []copyRun) error {
	var total int64
	for _, r := range runs {
		total += r.n
	}
	hint := !in.s.inlines(total)
	var buf []byte
	for _, r := range runs {
		if r.parts != nil {
			buf = slices.Grow(buf[:0], int(r.n))
			for _, p := range r.parts {
				k := len(buf)
				buf = buf[:k+int(p.n)]
				if _, err := in.adopt.ReadAt(buf[k:], p.srcOff); err != nil {
					return fmt.Errorf("read %s at %d: %w", in.adopt.Name(), p.srcOff, err)
				}
			}
			if err := r.app.WriteAt(buf, r.off); err != nil {
				return err
			}
		} else if err := r.app.CopyFrom(in.adopt, r.srcOff, r.off, r.n); err != nil {
			return err
		}
		if hint {
			r.app.StartWriteback(r.off, r.n)
		}
	}
	return nil
}

// adoptable reports whether the spool becomes the pack: a large spool
// whose bytes are mostly new, or the spool of a change (CommitChanges)
// with at least adoptMin new bytes. Such a spool holds only the changed
// cells, at their offsets; the rest is a hole already, so adopting it
// costs neither a copy nor space, where copying the change into a shared
// pack copies every new byte once more before the same flush (issue 9,
// "4 fsync writers": 35 MiB per fsync). The pack holds at least adoptMin
// live bytes, as any adopted pack: the bound on the number of packs
// holds.
func (in *ingest) adoptable() bool {
	if in.size < in.s.adoptMin {
		return false
	}
	if in.stats.Changes && in.stats.NewBytes >= in.s.adoptMin {
		return true
	}
	return float64(in.stats.NewBytes) >= adoptShare*float64(in.size)
}

// adoptSpool renames the source into packs/ as a new pack; every byte that
// is not one of its new chunks is punched out once the commit succeeds.
// Not before: until then the spool's bytes are the source (a chunk
// released meanwhile is written again from it), and a commit that fails
// gives the spool back to its writer, who commits it again.
func (in *ingest) adoptSpool() error {
	s := in.s
	pack, err := s.newPack()
	if err != nil {
		return err
	}
	a := &adoptedPack{pack: pack, size: in.size, spoolPath: in.adopt.Name()}
	if filepath.Dir(a.spoolPath) != filepath.Join(s.dir, "spool") {
		return fmt.Errorf("adopt %s: not a spool file of this store", a.spoolPath)
	}
	if err := os.Rename(a.spoolPath, s.packs.Path(pack)); err != nil {
		return fmt.Errorf("adopt spool: %w", err)
	}
	in.adopted = a
	sort.Slice(in.fresh, func(i, j int) bool { return in.fresh[i].off < in.fresh[j].off })
	var holes []blockstore.Loc
	var pos, live int64
	for _, c := range in.fresh {
		if c.off > pos {
			holes = append(holes, blockstore.Loc{Pack: pack, Off: pos, Len: c.off - pos})
		}
		st := in.states[c.id]
		st.written, st.loc = true, blockstore.Loc{Pack: pack, Off: c.off, Len: c.n}
		pos, live = c.off+c.n, live+c.n
	}
	if in.size > pos {
		holes = append(holes, blockstore.Loc{Pack: pack, Off: pos, Len: in.size - pos})
	}
	a.dead, a.holes = in.size-live, holes
	if s.inlines(live) {
		// Few live bytes: they go into the journal with the commit, and
		// the pack and its name are synced by the next checkpoint
		// (inline.go).
		ranges := make([][2]int64, 0, len(in.fresh))
		for _, c := range in.fresh {
			ranges = append(ranges, [2]int64{c.off, c.n})
		}
		rec, err := s.encodeData(pack, in.size, ranges, func(off, n int64, b []byte) error {
			_, err := in.adopt.ReadAt(b, off)
			return err
		})
		if err != nil {
			return fmt.Errorf("journal adopted pack: %w", err)
		}
		if _, err := s.appendData(pack, rec); err != nil {
			return err
		}
		in.stats.Adopted = true
		return nil
	}
	if err := in.adopt.Sync(); err != nil {
		return fmt.Errorf("sync adopted pack: %w", err)
	}
	in.stats.Adopted = true
	return syncDir(filepath.Join(s.dir, "packs"))
}

// newPack allocates a pack number for a file that becomes a pack whole.
func (s *Store) newPack() (uint32, error) {
	var pack uint32
	err := s.db.Update(func(tx *manifest.Tx) error {
		var err error
		pack, err = s.allocPack(tx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("allocate pack: %w", err)
	}
	return pack, nil
}

// allocPack allocates a new, empty pack in tx and marks it held, so that
// no other ingest appends to it.
func (s *Store) allocPack(tx *manifest.Tx) (uint32, error) {
	pack, err := tx.NextPack()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.held[pack] = true
	s.mu.Unlock()
	return pack, tx.PutPack(pack, manifest.Pack{})
}

// syncDir fsyncs a directory, making renames in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
