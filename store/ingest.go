package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
)

// ErrBlobMismatch: a file named by a sha256 in a blocks directory does not
// have that sha256.
var ErrBlobMismatch = errors.New("content does not match the blob name")

// PutOptions are the attributes of a file being committed.
type PutOptions struct {
	Mode  fs.FileMode // permissions; 0 means 0644
	Mtime time.Time   // zero means now
	UID   uint32      // owner of a new file
	GID   uint32
	// Progress, if set, is called with the bytes processed so far.
	Progress func(done, total int64)
}

// PutStats says what an ingest stored.
type PutStats struct {
	Kind         string // "mlxkv", "blob" or "plain"
	Note         string // why a .mlxkv was stored as plain
	Chunks       int    // chunk extents in the manifest
	NewChunks    int    // chunks appended to packs
	NewBytes     int64  // bytes appended to packs
	ReusedBytes  int64  // bytes of chunks already stored
	Adopted      bool   // the source file became a pack as it is
	ZeroBytes    int64  // bytes stored as zero runs
	ParentReused int64  // bytes matched against the parent snapshot's chunks
	Parent       uint64 // the parent snapshot's inode, 0 if none
}

// PutFile ingests the local file src as path.
func (s *Store) PutFile(ctx context.Context, src, path string, opts PutOptions) (*FileInfo, *PutStats, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, &fs.PathError{Op: "put", Path: src, Err: errors.New("not a regular file")}
	}
	if opts.Mode == 0 {
		opts.Mode = fi.Mode().Perm()
	}
	if opts.Mtime.IsZero() {
		opts.Mtime = fi.ModTime()
	}
	return s.Put(ctx, f, fi.Size(), path, opts)
}

// chunkRef is one chunk of the source, in file order.
type chunkRef struct {
	off, n int64
	id     blockstore.ID
	zero   bool
	parent bool // matched a parent chunk
}

// chunkState tracks a distinct chunk of an ingest.
type chunkState struct {
	off     int64 // where the source holds its bytes
	written bool  // appended by this ingest
	loc     blockstore.Loc
}

// batchBytes is how much of the source is read, hashed and appended at a
// time. Two batches are in memory: one being read, one being processed.
const batchBytes = 16 << 20

// Put ingests size bytes of src as the file at path, creating missing
// parent directories and replacing an existing file. It reads src once
// (again only for chunks that a concurrent release freed before the
// commit), and commits in one transaction.
func (s *Store) Put(ctx context.Context, src io.ReaderAt, size int64, path string, opts PutOptions) (*FileInfo, *PutStats, error) {
	comps, err := splitPath(path)
	if err == nil && len(comps) == 0 {
		err = manifest.ErrIsDir
	}
	if err != nil {
		return nil, nil, pathErr("put", path, err)
	}
	in := &ingest{s: s, src: src, size: size, comps: comps, opts: opts, states: map[blockstore.ID]*chunkState{}}
	fi, err := in.run(ctx)
	in.finish(err)
	if err != nil {
		return nil, nil, pathErr("put", path, err)
	}
	return fi, &in.stats, nil
}

// ingest is the state of one Put.
type ingest struct {
	s       *Store
	src     io.ReaderAt
	size    int64
	comps   []string
	opts    PutOptions
	plan    *plan
	refs    []chunkRef
	states  map[blockstore.ID]*chunkState
	blob    hashWriter // sha256 of the whole content, for blob files
	blobSum string     // its hex digest, once read
	slots   []*packSlot
	stats   PutStats
	jobs    chan<- writeJob // the writer goroutine's queue, while chunking
	// target, when set, is the inode whose name the new content takes
	// (CommitIno); otherwise comps name the destination.
	target uint64
	// adopt, when set, is the source as a spool file that may become a
	// pack as it is; fresh are its new chunks, placed after chunking.
	adopt   *os.File
	fresh   []chunkRef
	adopted *adoptedPack
}

// adoptedPack is a spool file renamed into the packs directory.
type adoptedPack struct {
	pack       uint32
	size, dead int64
	spoolPath  string // where it came from, to give it back on failure
}

// destination resolves, inside the commit transaction, where the new inode
// goes and what it replaces.
func (in *ingest) destination(tx *manifest.Tx) (parent uint64, name string, prev *manifest.Inode, err error) {
	if in.target != 0 {
		prev, err = tx.Inode(in.target)
		if errors.Is(err, manifest.ErrNotFound) {
			return 0, "", nil, fs.ErrNotExist
		}
		if err != nil {
			return 0, "", nil, err
		}
		if cur, err := tx.Lookup(prev.Parent, prev.Name); err != nil || cur != prev.Ino || prev.Name == "" {
			return 0, "", nil, fs.ErrNotExist // removed (or replaced) since the write began
		}
		return prev.Parent, prev.Name, prev, nil
	}
	if parent, err = parentOf(tx, in.comps, true); err != nil {
		return 0, "", nil, err
	}
	name = in.comps[len(in.comps)-1]
	if old, err := tx.Lookup(parent, name); err == nil {
		if prev, err = tx.Inode(old); err != nil {
			return 0, "", nil, err
		}
	}
	return parent, name, prev, nil
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

// packSlot is a pack open for appending by one ingest at a time, with the
// length that the index last committed for it.
type packSlot struct {
	app       *blockstore.Appender
	committed int64
}

func (in *ingest) run(ctx context.Context) (*FileInfo, error) {
	s := in.s
	in.plan = s.planFor(in.src, in.size, in.comps)
	in.stats.Kind, in.stats.Note = in.plan.kind, in.plan.note
	if in.plan.kind == kindBlob {
		in.blob = sha256.New()
	}
	t0 := time.Now()
	if err := in.chunkAll(ctx); err != nil {
		return nil, err
	}
	if in.adopt != nil {
		if err := in.place(); err != nil {
			return nil, err
		}
	}
	chunked := time.Since(t0)
	if in.blob != nil {
		in.blobSum = hex.EncodeToString(in.blob.Sum(nil))
		if name := in.comps[len(in.comps)-1]; hex64.MatchString(name) && name != in.blobSum {
			return nil, fmt.Errorf("%w: sha256 is %s", ErrBlobMismatch, in.blobSum)
		}
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	for attempt := 0; ; attempt++ {
		if err := in.sync(); err != nil {
			return nil, err
		}
		t1 := time.Now()
		fi, missing, err := in.commit()
		if err == nil {
			s.log.Debug("ingested", "path", fi.Path, "bytes", in.size, "kind", in.stats.Kind,
				"new", in.stats.NewBytes, "reused", in.stats.ReusedBytes, "chunk", chunked,
				"sync", t1.Sub(t0)-chunked, "commit", time.Since(t1))
			return fi, nil
		}
		if !errors.Is(err, errMissing) || attempt == 3 {
			return nil, err
		}
		// Chunks reused from the index were released before the commit:
		// write them again from the source.
		if err := in.rewrite(ctx, missing); err != nil {
			return nil, err
		}
	}
}

var errMissing = errors.New("reused chunks were released")

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
	err     error
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
}

// chunkAll reads the source batch by batch, cuts and hashes each batch on
// all cores, and hands the new chunks to a writer goroutine: reading batch
// k+2, hashing k+1 and writing k overlap.
func (in *ingest) chunkAll(ctx context.Context) error {
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
	go func() {
		defer close(wdone)
		for j := range jobs {
			if werr == nil && j.app != nil {
				if j.data != nil || srcFile == nil {
					werr = j.app.WriteAt(j.data, j.off)
				} else {
					werr = j.app.CopyFrom(srcFile, j.srcOff, j.off, j.n)
				}
				j.app.StartWriteback(j.off, j.n)
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
		if b.unmap != nil {
			// Mapped batches come from a file source, whose writes copy
			// from the file, not from buf: the mapping can go now.
			b.unmap()
			free <- nil
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
	if err == nil && done != in.size {
		if err = ctx.Err(); err == nil {
			err = fmt.Errorf("read %d of %d source bytes", done, in.size)
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
		for len(regs) > 0 && (n == 0 || n+regs[0].n <= batchBytes) {
			r := regs[0]
			if !r.row && !r.zero && n+r.n > batchBytes {
				take := max(in.s.chunkSize, (batchBytes-n)/in.s.chunkSize*in.s.chunkSize)
				if take < r.n {
					b.regions = append(b.regions, region{off: r.off, n: take})
					regs[0] = region{off: r.off + take, n: r.n - take}
					n += take
					break
				}
			}
			b.regions = append(b.regions, r)
			n += r.n
			regs = regs[1:]
		}
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return
		}
		if m, ok := mapSource(in.src, b.off, n); ok {
			// The batch is the page cache itself: no copy to hash it.
			if buf != nil {
				free <- buf // not needed; keep it for a later batch
			}
			b.buf, b.unmap = m.data, m.close
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

// processBatch cuts and hashes the regions of one batch in parallel, then
// deduplicates their chunks in file order and queues the new ones for
// writing: runs of new chunks that are contiguous in the source become one
// write. fromFile says the writer copies from the source file, so the
// batch buffer is free as soon as this returns.
func (in *ingest) processBatch(regions []region, base int64, buf []byte, fromFile bool) error {
	if in.blob != nil {
		in.blob.Write(buf)
	}
	// Split plain regions into chunk-sized work items so that a single
	// large region still hashes on every core.
	type item struct {
		r    region
		refs []chunkRef
	}
	var items []item
	C := in.s.chunkSize
	for _, r := range regions {
		data := buf[r.off-base : r.off-base+r.n]
		if r.zero {
			if isZero(data) {
				items = append(items, item{refs: []chunkRef{{off: r.off, n: r.n, zero: true}}})
				continue
			}
			r.zero = false
		}
		if r.row {
			items = append(items, item{r: r})
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
					it.refs = cutRegion(it.r, buf[it.r.off-base:it.r.off-base+it.r.n], C)
				}
			})
			if werr != nil {
				faulted.Store(true)
			}
		}()
	}
	wg.Wait()
	if faulted.Load() {
		return errSourceChanged
	}

	// Look every chunk not seen in this ingest up in the index at once.
	var unknown []blockstore.ID
	for _, it := range items {
		for _, c := range it.refs {
			if !c.zero {
				if _, ok := in.states[c.id]; !ok {
					unknown = append(unknown, c.id)
				}
			}
		}
	}
	stored := map[blockstore.ID]bool{}
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
			if fromFile {
				run.data = nil
			} else {
				run.data = buf[run.srcOff-base : run.srcOff-base+run.n]
			}
			in.jobs <- *run
			run = nil
		}
	}
	for _, it := range items {
		for _, c := range it.refs {
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
			app, err := in.appender(c.n)
			if err != nil {
				return err
			}
			loc := app.Reserve(c.n)
			if run == nil || run.app != app || run.off+run.n != loc.Off || run.srcOff+run.n != c.off {
				flush()
				run = &writeJob{app: app, off: loc.Off, srcOff: c.off}
			}
			run.n += c.n
			in.states[c.id] = &chunkState{off: c.off, written: true, loc: loc}
			in.stats.NewChunks++
			in.stats.NewBytes += c.n
		}
	}
	flush()
	return nil
}

// cutRegion cuts one region into chunks: first the parent's chunks for as
// long as the bytes hash to them, then every C bytes.
func cutRegion(r region, data []byte, C int64) []chunkRef {
	var out []chunkRef
	var pos int64
	var pending *chunkRef // a hash computed for a parent chunk that did not match
	for _, pc := range r.parent {
		if pos+pc.n > r.n {
			break
		}
		id := blockstore.Sum(data[pos : pos+pc.n])
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
			out = append(out, chunkRef{off: r.off + pos, n: n, id: blockstore.Sum(data[pos : pos+n])})
		}
		pending = nil
		pos += n
	}
	return out
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

// appender returns the pack for the next n new bytes, moving to a new pack
// when the current one is full.
func (in *ingest) appender(n int64) (*blockstore.Appender, error) {
	if k := len(in.slots); k == 0 || in.slots[k-1].app.Size() > 0 && in.slots[k-1].app.Size()+n > in.s.packBytes {
		slot, err := in.s.takePack(k > 0)
		if err != nil {
			return nil, err
		}
		in.slots = append(in.slots, slot)
	}
	return in.slots[len(in.slots)-1].app, nil
}

// takePack returns an idle pack with room: one in the pool, or one of the
// index's packs that no appender holds (after a restart); otherwise a new
// pack. fresh forces a new pack (the current one is full).
//
// Lock order: a bbolt write transaction, then s.mu (as in dropInode); so
// s.mu is never held while waiting for a transaction.
func (s *Store) takePack(fresh bool) (*packSlot, error) {
	if !fresh {
		s.mu.Lock()
		for i, p := range s.idle {
			if p.app.Size() < s.packBytes {
				s.idle = append(s.idle[:i], s.idle[i+1:]...)
				s.mu.Unlock()
				return p, nil
			}
		}
		s.mu.Unlock()
	}
	var pack uint32
	var committed int64
	err := s.db.Update(func(tx *manifest.Tx) error {
		pack, committed = 0, 0
		if !fresh {
			packs, err := tx.Packs()
			if err != nil {
				return err
			}
			s.mu.Lock()
			for n, p := range packs {
				if !s.held[n] && p.Committed < s.packBytes && (pack == 0 || n > pack) {
					pack, committed = n, p.Committed
				}
			}
			if pack != 0 {
				s.held[pack] = true
			}
			s.mu.Unlock()
			if pack != 0 {
				return nil
			}
		}
		var err error
		if pack, err = tx.NextPack(); err != nil {
			return err
		}
		s.mu.Lock()
		s.held[pack] = true
		s.mu.Unlock()
		return tx.PutPack(pack, manifest.Pack{})
	})
	if err == nil {
		var app *blockstore.Appender
		if app, err = s.packs.NewAppender(pack, committed); err == nil {
			return &packSlot{app: app, committed: committed}, nil
		}
	}
	if pack != 0 {
		s.mu.Lock()
		delete(s.held, pack)
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("allocate pack: %w", err)
}

// sync makes every appended chunk durable.
func (in *ingest) sync() error {
	for _, p := range in.slots {
		if err := p.app.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// rewrite appends again the chunks that were released before the commit.
func (in *ingest) rewrite(ctx context.Context, missing []blockstore.ID) error {
	for _, id := range missing {
		if err := ctx.Err(); err != nil {
			return err
		}
		st := in.states[id]
		var n int64
		for _, c := range in.refs {
			if c.id == id && !c.zero {
				n = c.n
				break
			}
		}
		buf := make([]byte, n)
		if _, err := in.src.ReadAt(buf, st.off); err != nil && !(err == io.EOF && int64(len(buf)) == n) {
			return fmt.Errorf("read source at %d: %w", st.off, err)
		}
		if blockstore.Sum(buf) != id {
			return fmt.Errorf("source changed during ingest (bytes at %d)", st.off)
		}
		app, err := in.appender(n)
		if err != nil {
			return err
		}
		loc, err := app.Append(buf)
		if err != nil {
			return err
		}
		st.written, st.loc = true, loc
		in.stats.NewChunks++
		in.stats.NewBytes += n
	}
	return nil
}

// commit publishes the file in one transaction: chunk records and
// refcounts, pack lengths, the inode, its manifest and its name.
func (in *ingest) commit() (*FileInfo, []blockstore.ID, error) {
	s := in.s
	m := make(manifest.Manifest, 0, len(in.refs))
	for _, c := range in.refs {
		m = append(m, manifest.Extent{Zero: c.zero, ID: c.id, Len: c.n})
	}
	in.stats.Chunks = len(m)
	in.stats.Parent = in.plan.parentIno
	mode := in.opts.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	mtime := in.opts.Mtime
	if mtime.IsZero() {
		mtime = time.Now()
	}
	var fi *FileInfo
	var missing []blockstore.ID
	var freed []blockstore.Loc
	err := s.db.Update(func(tx *manifest.Tx) error {
		missing = missing[:0]
		dead := map[uint32]int64{}
		// Sorted keys make bbolt's inserts sequential: far fewer page
		// splits than the manifest's order.
		ids := m.Chunks()
		slices.SortFunc(ids, func(a, b blockstore.ID) int { return bytes.Compare(a[:], b[:]) })
		for _, id := range ids {
			st := in.states[id]
			c, err := tx.Chunk(id)
			switch {
			case err == nil:
				c.Refs++
				if st.written {
					dead[st.loc.Pack] += st.loc.Len // a concurrent ingest stored it first
				}
			case !errors.Is(err, manifest.ErrNotFound):
				return err
			case st.written:
				c = manifest.Chunk{Loc: st.loc, Refs: 1}
			default:
				missing = append(missing, id)
				continue
			}
			if err := tx.PutChunk(id, c); err != nil {
				return err
			}
		}
		if len(missing) > 0 {
			return errMissing
		}
		if a := in.adopted; a != nil {
			if err := tx.PutPack(a.pack, manifest.Pack{Committed: a.size, Dead: a.dead + dead[a.pack]}); err != nil {
				return err
			}
		}
		for _, p := range in.slots {
			st, err := tx.Pack(p.app.Pack())
			if err != nil {
				return err
			}
			st.Committed = p.app.Size()
			st.Dead += dead[p.app.Pack()]
			if err := tx.PutPack(p.app.Pack(), st); err != nil {
				return err
			}
		}
		parent, name, prev, err := in.destination(tx)
		if err != nil {
			return err
		}
		if prev != nil {
			if prev.IsDir() {
				return manifest.ErrIsDir
			}
			if freed, err = s.dropInode(tx, prev); err != nil {
				return err
			}
		}
		ino, err := tx.NextIno()
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		n := &manifest.Inode{Ino: ino, Mode: mode, Size: m.Size(), Mtime: mtime.UnixNano(), Ctime: now,
			ManifestID: m.ID(), Kind: in.plan.kind, Note: in.plan.note, Layout: in.plan.layout,
			Parent: parent, Name: name, UID: in.opts.UID, GID: in.opts.GID}
		if prev != nil && in.target != 0 {
			// A new version of the same file keeps its attributes.
			n.Mode, n.UID, n.GID, n.Xattrs = prev.Mode, prev.UID, prev.GID, prev.Xattrs
		}
		n.Blob = in.blobSum
		if err := tx.PutInode(n); err != nil {
			return err
		}
		if err := tx.PutManifest(ino, m); err != nil {
			return err
		}
		if err := tx.Link(parent, name, ino); err != nil {
			return err
		}
		if n.Layout != "" {
			if err := tx.AddSnapshot(n.Layout, ino, in.plan.tokens); err != nil {
				return err
			}
		}
		if n.Blob != "" {
			if err := tx.AddBlob(n.Blob, ino); err != nil {
				return err
			}
			if err := blobStored(tx, n.Blob, m); err != nil {
				return err
			}
		}
		if len(in.plan.pins) > 0 {
			if err := pinBlobs(tx, ino, in.plan.pins); err != nil {
				return err
			}
		}
		if err := touchDir(tx, parent); err != nil {
			return err
		}
		fi = info(path.Join(in.comps...), name, n)
		return nil
	})
	if err != nil {
		return nil, missing, err
	}
	for _, p := range in.slots {
		p.committed = p.app.Size()
	}
	s.punch(freed)
	return fi, nil, nil
}

// finish returns the ingest's packs to the idle pool: committed, or rolled
// back to their last committed length after a failure.
func (in *ingest) finish(err error) {
	s := in.s
	if a := in.adopted; a != nil {
		if err != nil {
			// Give the spool back to its writer, and forget the pack.
			if rerr := os.Rename(s.packs.Path(a.pack), a.spoolPath); rerr != nil {
				s.log.Error("return spool after a failed commit", "spool", a.spoolPath, "err", rerr)
			}
			s.db.Update(func(tx *manifest.Tx) error { return tx.DeletePack(a.pack) })
		}
		s.mu.Lock()
		delete(s.held, a.pack)
		s.mu.Unlock()
	}
	for _, p := range in.slots {
		if err != nil && p.app.Size() != p.committed {
			if rerr := p.app.Rollback(p.committed); rerr != nil {
				s.log.Warn("roll back pack", "err", rerr)
				s.release(p)
				continue
			}
		}
		if p.app.Size() >= s.packBytes {
			s.release(p)
			continue
		}
		s.mu.Lock()
		s.idle = append(s.idle, p)
		s.mu.Unlock()
	}
	in.slots = nil
}

// release closes a pack's appender and lets takePack hand it out again
// (by its committed length in the index).
func (s *Store) release(p *packSlot) {
	p.app.Close()
	s.mu.Lock()
	delete(s.held, p.app.Pack())
	s.mu.Unlock()
}
