package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// chunkInfo is a chunk record with its ID, as Problems collects them.
type chunkInfo struct {
	id blockstore.ID
	c  manifest.Chunk
}

// verifyWindow is how much of a pack one read takes: large enough that a
// disk streams (and the kernel's readahead keeps up), small enough that a
// few windows in flight stay a few tens of MiB.
const verifyWindow = 8 << 20

// window is a range of one pack read in one go and the chunks inside it.
type window struct {
	buf    []byte
	off    int64 // pack offset of buf[0]
	chunks []chunkInfo
}

// verifyChunks checks every chunk's sha256, reading each pack front to
// back in large windows (chunks sorted by pack and offset, as Problems
// sorts them) and hashing the windows on every CPU while the next is
// read: at the speed of the disk, not of one random 64 KiB read per chunk.
// A chunk that cannot be read whole or does not match is reported lost.
func (s *Store) verifyChunks(ctx context.Context, chunks []chunkInfo, progress func(done, total int64), add func(Problem)) error {
	var total int64
	for _, ci := range chunks {
		total += ci.c.Loc.Len
	}
	var done atomic.Int64
	workers := max(runtime.GOMAXPROCS(0), 1)
	free := make(chan []byte, workers+2)
	for range workers + 2 {
		free <- nil
	}
	work := make(chan window)
	var mu sync.Mutex // guards add
	report := func(p Problem) { mu.Lock(); add(p); mu.Unlock() }
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range work {
				var n int64
				for _, ci := range w.chunks {
					loc := ci.c.Loc
					lo, hi := loc.Off-w.off, loc.End()-w.off
					switch {
					case hi > int64(len(w.buf)):
						report(Problem{Kind: ProblemLost, Chunk: ci.id, Loc: loc, Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d): the pack file ends at %d", ci.id, loc.Pack, loc.Off, loc.Len, w.off+int64(len(w.buf)))})
					case blockstore.Sum(w.buf[lo:hi]) != ci.id:
						report(Problem{Kind: ProblemLost, Chunk: ci.id, Loc: loc, Msg: fmt.Sprintf("chunk %s at pack %d [%d,+%d) does not match its hash", ci.id, loc.Pack, loc.Off, loc.Len)})
					}
					n += loc.Len
				}
				free <- w.buf
				if d := done.Add(n); progress != nil {
					progress(d, total)
				}
			}
		}()
	}
	err := s.readWindows(ctx, chunks, free, work, report)
	close(work)
	wg.Wait()
	return err
}

// readWindows reads the windows covering chunks, pack by pack, and hands
// them to work; buffers come from free.
func (s *Store) readWindows(ctx context.Context, chunks []chunkInfo, free chan []byte, work chan<- window, report func(Problem)) error {
	for i := 0; i < len(chunks); {
		pack := chunks[i].c.Loc.Pack
		j := i
		for j < len(chunks) && chunks[j].c.Loc.Pack == pack {
			j++
		}
		if err := s.readPackWindows(ctx, chunks[i:j], free, work, report); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (s *Store) readPackWindows(ctx context.Context, chunks []chunkInfo, free chan []byte, work chan<- window, report func(Problem)) error {
	pf, err := s.packs.Acquire(chunks[0].c.Loc.Pack) // advised sequential
	if errors.Is(err, fs.ErrNotExist) {
		// Gone since the chunks were listed (Problems saw the file): in
		// a mounted store, compaction rewrote the pack and removed it,
		// and its chunks live elsewhere now; the next check verifies
		// them there (TestGCStress). A store checked offline is the
		// check's alone, so there it does not happen.
		return nil
	}
	if err != nil {
		// Not a loss to repair (the file is there: Problems saw it), but
		// no verification either.
		return fmt.Errorf("verify: %w", err)
	}
	defer pf.Release()
	f := pf.File()
	for i := 0; i < len(chunks); {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := chunks[i].c.Loc.Off
		end := max(start+verifyWindow, chunks[i].c.Loc.End())
		j := i + 1
		for j < len(chunks) && chunks[j].c.Loc.End() <= end {
			j++
		}
		end = start
		for _, ci := range chunks[i:j] {
			end = max(end, ci.c.Loc.End()) // overlapping chunks (reported) may end before the last
		}
		buf := <-free
		if int64(cap(buf)) < end-start {
			buf = make([]byte, max(end-start, verifyWindow))
		}
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && err != io.EOF {
			// A bad sector: read the window's chunks one by one, so that
			// only those it holds are lost.
			for _, ci := range chunks[i:j] {
				loc := ci.c.Loc
				if err := s.packs.ReadChunk(buf[:loc.Len], ci.id, loc, true); err != nil {
					report(Problem{Kind: ProblemLost, Chunk: ci.id, Loc: loc, Msg: err.Error()})
				}
			}
			free <- buf
			i = j
			continue
		}
		work <- window{buf: buf[:n], off: start, chunks: chunks[i:j]}
		i = j
	}
	return nil
}
