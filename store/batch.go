package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// batchBytes is how much of the source is read, hashed and appended at a
// time. At most three batches are in memory (one being read, one being
// hashed, one being written), none when the source is a mapped file.
const batchBytes = 16 << 20

// errSourceChanged: the source file shrank while it was being read.
var errSourceChanged = errors.New("source file changed (truncated) while it was being stored")

// guardFault runs fn and turns a memory fault into errSourceChanged: with a
// mapped source, a file truncated under the mapping faults when touched
// (SIGBUS), which must fail the ingest, not the process.
func guardFault(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); ok {
				err = errSourceChanged
				return
			}
			panic(r)
		}
	}()
	return fn()
}

// batch is a run of whole regions read into memory together.
type batch struct {
	regions []region
	off     int64
	buf     []byte
	unmap   func() // set when buf is a mapping of the source
	// spare is the buffer token a mapped batch took from the free list
	// and did not use: it goes back in its place once the batch is
	// processed, so that each batch holds exactly one token. (Given back
	// early by the reader as well, the list could hold one token more
	// than its capacity, and the last give-back would block for good.)
	spare []byte
	// borrowed: buf is a slice of a source held in memory (memSource),
	// not a buffer of the ingest's to reuse.
	borrowed bool
	err      error
}

// writeJob fills reserved pack bytes: from data, or from the source file
// at srcOff when the source is a file (copied inside the kernel).
type writeJob struct {
	app    *blockstore.Appender
	off    int64 // pack offset
	data   []byte
	srcOff int64
	n      int64
	after  func() // runs once the job is done (returns a buffer)
	// gathered holds the bytes of chunks next to each other in the pack
	// but not in the source, copied out of the batch.
	gathered []byte
}

// maxGather bounds a write job that gathers chunks, and any other: the
// writer goroutine starts each job's writeback as it is written.
const maxGather = 4 << 20

// chunkAll reads the source batch by batch, cuts and hashes each batch on
// all cores, and hands the new chunks to a writer goroutine: reading batch
// k+2, hashing k+1 and writing k overlap.
func (in *ingest) chunkAll(ctx context.Context) error {
	// The size, unless the plan covers only changes; counted before
	// readBatches splits regions in place.
	var want int64
	for _, r := range in.plan.regions {
		want += r.n
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan *batch, 1)
	free := make(chan []byte, 3)
	for range 3 {
		free <- nil
	}
	go in.readBatches(ctx, batches, free)

	jobs := make(chan writeJob, 256)
	var werr error
	wdone := make(chan struct{})
	srcFile, _ := in.src.(*os.File)
	// A commit whose new bytes the journal will carry (inline.go: at most
	// want of them) does not start the writeback of its packs: its sync is
	// the journal's, and the next checkpoint syncs the packs. The hint
	// would cost a system call that starts a disk write per small file.
	hint := !in.s.inlines(want)
	go func() {
		defer close(wdone)
		for j := range jobs {
			if werr == nil && j.app != nil {
				if j.data != nil || srcFile == nil {
					werr = j.app.WriteAt(j.data, j.off)
				} else {
					werr = j.app.CopyFrom(srcFile, j.srcOff, j.off, j.n)
				}
				if hint {
					j.app.StartWriteback(j.off, j.n)
				}
			}
			if j.after != nil {
				j.after()
			}
		}
	}()
	in.jobs = jobs
	var done int64
	var err error
	for b := range batches {
		if err == nil {
			err = b.err
		}
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			err = guardFault(func() error { return in.processBatch(b.regions, b.off, b.buf, srcFile != nil) })
		}
		if b.borrowed {
			// The writer writes from the source's own bytes: nothing to
			// give back or to wait for.
			free <- nil
		} else if b.unmap != nil {
			// Mapped batches come from a file source, whose writes copy
			// from the file, not from buf: the mapping can go now.
			b.unmap()
			free <- b.spare
		} else {
			buf := b.buf
			jobs <- writeJob{after: func() { free <- buf }}
		}
		if err != nil {
			cancel() // stop the reader; the loop drains what it sent
			continue
		}
		done += int64(len(b.buf))
		if in.opts.Progress != nil {
			in.opts.Progress(done, in.size)
		}
	}
	close(jobs)
	<-wdone
	in.jobs = nil
	if err == nil {
		err = werr
	}
	if err == nil && done != want {
		if err = ctx.Err(); err == nil {
			err = fmt.Errorf("read %d of %d source bytes", done, want)
		}
	}
	return err
}

// readBatches reads the plan's regions in batches of up to batchBytes:
// whole regions, at least one; plain regions are split at C multiples.
func (in *ingest) readBatches(ctx context.Context, batches chan<- *batch, free chan []byte) {
	defer close(batches)
	regs := in.plan.regions
	for len(regs) > 0 {
		b := &batch{off: regs[0].off}
		var n int64
		b.regions, regs, n = takeBatch(regs, in.s.chunkSize)
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return
		}
		ms, mem := in.src.(memSource)
		if mem {
			b.buf, b.borrowed = ms.slice(b.off, n)
		}
		if b.borrowed {
			// Its token goes back once the batch is processed (chunkAll).
		} else if m, ok := in.mapBatch(b.off, n); ok {
			// The batch is the page cache itself: no copy to hash it.
			// The buffer is not needed; it is kept for a later batch.
			b.buf, b.unmap, b.spare = m.data, m.close, buf
		} else {
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			b.buf = buf[:n]
			if _, err := in.src.ReadAt(b.buf, b.off); err != nil && !(err == io.EOF && int64(len(b.buf)) == n) {
				b.err = fmt.Errorf("read source at %d: %w", b.off, err)
			}
		}
		select {
		case batches <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// takeBatch takes the regions of the next batch off regs: whole
// regions, at least one, of up to batchBytes in all; a plain region is
// split at a multiple of C, a row longer than a batch by splitRow. It
// returns the batch, the regions after it (the first of which may be
// what is left of a split one) and the batch's bytes.
func takeBatch(regs []region, C int64) (batch, rest []region, n int64) {
	off := regs[0].off
	// A batch is one contiguous run of the source: the regions of a
	// commit of changes (CommitChanges) leave gaps.
	for len(regs) > 0 && (n == 0 || n+regs[0].n <= batchBytes && regs[0].off == off+n) {
		r := regs[0]
		if r.row && n == 0 && r.n > batchBytes {
			// A row longer than a batch (a safetensors tensor of one
			// row, a llama.cpp layer's K block) is read a batch at a
			// time: a 2 GiB row made a 2 GiB batch (red team, issue
			// 29).
			first, left := splitRow(r, batchBytes, C)
			regs[0] = left
			return append(batch, first), regs, n + first.n
		}
		if !r.row && !r.zero && n+r.n > batchBytes {
			take := max(C, (batchBytes-n)/C*C)
			if take < r.n {
				regs[0] = region{off: r.off + take, n: r.n - take, cdc: r.cdc}
				return append(batch, region{off: r.off, n: take, cdc: r.cdc}), regs, n + take
			}
		}
		batch = append(batch, r)
		n += r.n
		regs = regs[1:]
	}
	return batch, regs, n
}

// mapBatch maps n bytes of the source at off, if it is a file that can
// be mapped; in.mapper, when set, replaces mapSource (tests make mappings
// fail).
func (in *ingest) mapBatch(off, n int64) (mapping, bool) {
	if in.mapper != nil {
		return in.mapper(in.src, off, n)
	}
	return mapSource(in.src, off, n)
}

// processBatch cuts and hashes the regions of one batch in parallel, then
// deduplicates their chunks in file order and queues the new ones for
// writing: runs of new chunks that are contiguous in the source become one
// write. fromFile says the writer copies from the source file, so the
// batch buffer is free as soon as this returns.
func (in *ingest) processBatch(regions []region, base int64, buf []byte, fromFile bool) error {
	if in.blob != nil {
		in.blob.Write(buf)
	}
	cuts := cdcCuts
	if in.known != nil {
		cuts = func(r region, data []byte, C int64) []region { return hintedCuts(r, data, C, in.known) }
	}
	var hashed atomic.Int64
	// sum is a chunk's sha256: as the writer computed it (in.known), or
	// hashed here.
	sum := func(off int64, b []byte) blockstore.ID {
		if k, ok := in.known[off]; ok && k.n == int64(len(b)) {
			return k.sum
		}
		hashed.Add(int64(len(b)))
		return blockstore.Sum(b)
	}
	refs, err := cutBatch(regions, base, buf, in.s.chunkSize, cuts, sum)
	in.stats.HashedBytes += hashed.Load()
	if err != nil {
		return err
	}

	// Look every chunk not seen in this ingest up in the index at once,
	// but the parent's: a chunk that hashed to the parent's chunk is
	// stored as far as the plan could tell, and the commit's transaction
	// checks every chunk again (errMissing: written from the source
	// then). A transposed V's channel runs are all the parent's chunks
	// but each run's new tail, looked up by the thousand.
	var unknown []blockstore.ID
	stored := map[blockstore.ID]bool{}
	for _, c := range refs {
		if !c.zero {
			if _, ok := in.states[c.id]; !ok {
				if c.parent {
					stored[c.id] = true
					continue
				}
				unknown = append(unknown, c.id)
			}
		}
	}
	if len(unknown) > 0 {
		in.s.db.View(func(tx *manifest.Tx) error {
			for _, id := range unknown {
				if _, err := tx.Chunk(id); err == nil {
					stored[id] = true
				}
			}
			return nil
		})
	}
	var run *writeJob // the write being extended
	flush := func() {
		if run != nil {
			switch {
			case run.gathered != nil:
				run.data = run.gathered
			case fromFile:
				run.data = nil
			default:
				run.data = buf[run.srcOff-base : run.srcOff-base+run.n]
			}
			in.jobs <- *run
			run = nil
		}
	}
	for _, c := range refs {
		in.refs = append(in.refs, c)
		switch {
		case c.zero:
			in.stats.ZeroBytes += c.n
			flush()
			continue
		case c.parent:
			in.stats.ParentReused += c.n
		}
		if _, ok := in.states[c.id]; ok || stored[c.id] {
			if !ok {
				in.states[c.id] = &chunkState{off: c.off}
			}
			in.stats.ReusedBytes += c.n
			flush()
			continue
		}
		if in.adopt != nil {
			// Placed after chunking: in the adopted file itself, or
			// copied (see place).
			in.states[c.id] = &chunkState{off: c.off}
			in.fresh = append(in.fresh, c)
			in.stats.NewChunks++
			in.stats.NewBytes += c.n
			continue
		}
		app, loc, err := in.reserve(c.n)
		if err != nil {
			return err
		}
		switch {
		case run == nil || run.app != app || run.off+run.n != loc.Off || run.n >= maxGather:
			flush()
			run = &writeJob{app: app, off: loc.Off, srcOff: c.off}
		case run.gathered == nil && run.srcOff+run.n != c.off:
			// Next in the pack but not in the source (a transposed
			// V's new tail of each channel run, between stored
			// bytes): the run's bytes are gathered, to write in
			// one call rather than one and a writeback hint per
			// chunk of a few KiB.
			run.gathered = append(make([]byte, 0, 2*run.n+c.n), buf[run.srcOff-base:run.srcOff-base+run.n]...)
		}
		if run.gathered != nil {
			run.gathered = append(run.gathered, buf[c.off-base:c.off-base+c.n]...)
		}
		run.n += c.n
		in.states[c.id] = &chunkState{off: c.off, written: true, loc: loc}
		in.stats.NewChunks++
		in.stats.NewBytes += c.n
	}
	flush()
	return nil
}

// cutBatch cuts the regions of one batch (whose bytes, from file offset
// base, are buf) into chunks and hashes them on every core: zero regions
// whose bytes are zero as zero runs, rows by cutRegion, content-cut
// regions where cuts says (cut in order: a cut depends on the one
// before), anything else every C bytes. sum gives a chunk's sha256. A
// fault reading buf (a mapping of a source that shrank) is
// errSourceChanged.
func cutBatch(regions []region, base int64, buf []byte, C int64, cuts func(region, []byte, int64) []region,
	sum func(off int64, b []byte) blockstore.ID) ([]chunkRef, error) {
	// Split plain regions into chunk-sized work items so that a single
	// large region still hashes on every core.
	type item struct {
		r    region
		refs []chunkRef
	}
	var items []item
	for _, r := range regions {
		data := buf[r.off-base : r.off-base+r.n]
		if r.zero {
			if isZero(data) {
				items = append(items, item{refs: []chunkRef{{off: r.off, n: r.n, zero: true}}})
				continue
			}
			r.zero = false
		}
		if r.known {
			items = append(items, item{refs: []chunkRef{{off: r.off, n: r.n, id: r.sum}}})
			continue
		}
		if r.row {
			items = append(items, item{r: r})
			continue
		}
		if r.cdc {
			// Long runs of zero pages (holes) are zero runs.
			for _, part := range splitZeros(r, data) {
				if part.zero {
					items = append(items, item{refs: []chunkRef{{off: part.off, n: part.n, zero: true}}})
					continue
				}
				for _, c := range cuts(part, buf[part.off-base:part.off-base+part.n], C) {
					items = append(items, item{r: c})
				}
			}
			continue
		}
		for off := int64(0); off < r.n; off += C {
			items = append(items, item{r: region{off: r.off + off, n: min(C, r.n-off)}})
		}
	}
	var next atomic.Int64
	var faulted atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr := guardFault(func() error {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(items) {
						return nil
					}
					it := &items[i]
					if it.refs != nil {
						continue
					}
					refs, err := cutRegion(it.r, buf[it.r.off-base:it.r.off-base+it.r.n], C, sum)
					if err != nil {
						return err
					}
					it.refs = refs
				}
			})
			if werr != nil {
				faulted.Store(true)
			}
		}()
	}
	wg.Wait()
	if faulted.Load() {
		return nil, errSourceChanged
	}
	var out []chunkRef
	for _, it := range items {
		out = append(out, it.refs...)
	}
	return out, nil
}

// splitRow splits a row region of more than limit bytes in two: at the
// end of the parent's chunks that fit in limit, if they cover half of it
// (the rest goes on matching the parent's chunks after them), else at the
// last multiple of C within limit (the rest, with no parent, cut every C bytes
// from there, as the whole row would be cut where no parent matches).
func splitRow(r region, limit, C int64) (first, rest region) {
	var pos int64
	k := 0
	for k < len(r.parent) && pos+r.parent[k].n <= limit {
		pos += r.parent[k].n
		k++
	}
	first = region{off: r.off, n: pos, row: true, parent: r.parent[:k]}
	rest = region{off: r.off + pos, n: r.n - pos, row: true, parent: r.parent[k:]}
	if pos < limit/2 {
		take := max(C, limit/C*C)
		first.n = take
		rest = region{off: r.off + take, n: r.n - take, row: true}
	}
	return first, rest
}

// cutRegion cuts one region into chunks: first the parent's chunks for as
// long as the bytes hash to them, then every C bytes. sum gives the
// sha256 of the chunk at a file offset. A region of wideRegion bytes or
// more is hashed on every core (wideCut).
func cutRegion(r region, data []byte, C int64, sum func(off int64, b []byte) blockstore.ID) ([]chunkRef, error) {
	if r.n >= wideRegion {
		return wideCut(r, data, C, sum)
	}
	return narrowCut(r, data, C, sum), nil
}

// narrowCut is cutRegion on the calling goroutine.
func narrowCut(r region, data []byte, C int64, sum func(off int64, b []byte) blockstore.ID) []chunkRef {
	var out []chunkRef
	var pos int64
	var pending *chunkRef // a hash computed for a parent chunk that did not match
	for _, pc := range r.parent {
		if pos+pc.n > r.n {
			break
		}
		id := sum(r.off+pos, data[pos:pos+pc.n])
		if id != pc.id {
			pending = &chunkRef{off: r.off + pos, n: pc.n, id: id}
			break
		}
		out = append(out, chunkRef{off: r.off + pos, n: pc.n, id: id, parent: true})
		pos += pc.n
	}
	for pos < r.n {
		n := min(C, r.n-pos)
		if pending != nil && pending.off == r.off+pos && pending.n == n {
			out = append(out, *pending) // the same bytes: no second hash
		} else {
			out = append(out, chunkRef{off: r.off + pos, n: n, id: sum(r.off+pos, data[pos:pos+n])})
		}
		pending = nil
		pos += n
	}
	return out
}

// wideRegion is the size from which a region's chunks are hashed on every
// core: a llama.cpp layer's K block is one row of up to gigabytes, and its
// commit hashed it on one (issue 29, H200: 1.0 core, 2 s for a 1.5 GiB
// file). A batch holds whole rows, so the batch's other workers may have
// nothing else to do.
const wideRegion = 4 << 20

// wideCut is cutRegion on every core: the parent's chunks are hashed at
// once (those after the first that does not match are hashed for
// nothing: at most the parent's rest of the row, when a conversation
// branches), then the chunks every C bytes from the first mismatch.
func wideCut(r region, data []byte, C int64, sum func(off int64, b []byte) blockstore.ID) ([]chunkRef, error) {
	var pieces []chunkRef
	var pos int64
	for _, pc := range r.parent {
		if pos+pc.n > r.n {
			break
		}
		pieces = append(pieces, chunkRef{off: r.off + pos, n: pc.n, id: pc.id, parent: true})
		pos += pc.n
	}
	sums, err := sumAll(pieces, nil, r.off, data, sum)
	if err != nil {
		return nil, err
	}
	var out []chunkRef
	var pending *chunkRef
	pos = 0
	for i, c := range pieces {
		if sums[i] != c.id {
			pending = &chunkRef{off: c.off, n: c.n, id: sums[i]}
			break
		}
		out = append(out, c)
		pos += c.n
	}
	var tail []chunkRef
	for p := pos; p < r.n; p += C {
		tail = append(tail, chunkRef{off: r.off + p, n: min(C, r.n-p)})
	}
	summed := make([]bool, len(tail))
	if pending != nil && len(tail) > 0 && tail[0].off == pending.off && tail[0].n == pending.n {
		tail[0].id, summed[0] = pending.id, true // the same bytes: no second hash
	}
	tsums, err := sumAll(tail, summed, r.off, data, sum)
	if err != nil {
		return nil, err
	}
	for i := range tail {
		if !summed[i] {
			tail[i].id = tsums[i]
		}
	}
	return append(out, tail...), nil
}

// sumAll hashes the chunks (of a region at base, whose bytes are data) on
// every core, but those that summed marks (nil: none). The goroutines read
// data, which may be a mapping of the source: each turns a fault into an
// error (guardFault), as the batch's workers do.
func sumAll(cs []chunkRef, summed []bool, base int64, data []byte, sum func(off int64, b []byte) blockstore.ID) ([]blockstore.ID, error) {
	out := make([]blockstore.ID, len(cs))
	var next atomic.Int64
	var faulted atomic.Bool
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(cs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := guardFault(func() error {
				for {
					i := int(next.Add(1) - 1)
					if i >= len(cs) {
						return nil
					}
					if summed == nil || !summed[i] {
						c := cs[i]
						out[i] = sum(c.off, data[c.off-base:c.off-base+c.n])
					}
				}
			})
			if err != nil {
				faulted.Store(true)
			}
		}()
	}
	wg.Wait()
	if faulted.Load() {
		return nil, errSourceChanged
	}
	return out, nil
}

var zeroPage [64 << 10]byte

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}
