package pool

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// File is a pool file opened for reading: its manifest, resolved once.
// Chunks are fetched as they are read (from the local cache, or with a
// ranged GET of their pack) and each is checked against its sha256. A
// chunk that is missing or does not match is an EIO for that read, never
// wrong bytes.
type File struct {
	p    *Pool
	path string
	m    *Manifest

	mu   sync.Mutex // guards last, ahead and next
	last struct {
		i    int
		data []byte // nil: none
	}
	// ahead are the chunks fetched ahead of a sequential reader, by
	// index; next is the chunk after the last read's last.
	ahead    map[int]*pending
	aheadSem chan struct{} // bounds the GETs of ahead to readers at once
	next     int
}

// pending is a chunk being fetched ahead: data and err are set when done
// is closed.
type pending struct {
	done chan struct{}
	data []byte
	err  error
}

// aheadChunks is how many chunks a sequential reader has fetched ahead of
// it at least, and aheadBytes how many bytes (of chunks cut where rows
// end, which may be far smaller than the chunk size), up to
// maxAheadChunks: the kernel reads a file in requests far smaller than a
// chunk, one after the other, so without it a cold read waits for one
// GET per chunk in turn.
const (
	aheadChunks    = 8
	aheadBytes     = 8 << 20
	maxAheadChunks = 4096
)

// Size is the file's length.
func (f *File) Size() int64 { return f.m.Size }

// Open resolves a pool file: its name in etcd, its manifest object
// (checked against its hash), and the presence of its pack objects. A
// name that is missing, or whose objects are, is fs.ErrNotExist.
func (p *Pool) Open(ctx context.Context, path string) (*File, error) {
	f, err := p.open(ctx, path)
	if err != nil {
		return nil, err
	}
	p.touch(ctx, path)
	return f, nil
}

// open is Open without recording a use.
func (p *Pool) open(ctx context.Context, path string) (*File, error) {
	name, err := p.resolve(ctx, "open", path)
	if err != nil {
		return nil, err
	}
	return p.openManifest(ctx, name, path)
}

// resolve returns the manifest path names.
func (p *Pool) resolve(ctx context.Context, op, path string) (string, error) {
	if err := checkPath(path); err != nil {
		return "", err
	}
	octx, cancel := p.op(ctx)
	resp, err := p.coord.cli.Get(octx, p.coord.namesKey(path))
	cancel()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", op, path, p.etcd.named(p.explain(ctx, err)))
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("%s %s: %w", op, path, fs.ErrNotExist)
	}
	return string(resp.Kvs[0].Value), nil
}

// Resolve returns the version a pool file's name points to now: its
// manifest's name (which names that content for good: a later publish
// under the path makes another) and its size.
func (p *Pool) Resolve(ctx context.Context, path string) (manifest string, size int64, err error) {
	name, err := p.resolve(ctx, "stat", path)
	if err != nil {
		return "", 0, err
	}
	m, err := p.manifest(ctx, name)
	if err != nil {
		return "", 0, fmt.Errorf("stat %s: %w", path, p.explain(ctx, err))
	}
	p.learn(name, m)
	return name, m.Size, nil
}

// OpenVersion opens the version of a pool file that Resolve returned,
// whatever its name points to now, and records a use of path (which
// names it in errors). A filesystem serves each node's own version so
// that the size it told the kernel is the size of what reads return.
// The use is recorded in the background: an open of a version whose
// chunks are cached does not wait on etcd.
func (p *Pool) OpenVersion(ctx context.Context, manifest, path string) (*File, error) {
	f, err := p.openManifest(ctx, manifest, path)
	if err != nil {
		return nil, err
	}
	go p.touch(context.WithoutCancel(ctx), path)
	return f, nil
}

// openManifest opens manifest name as the file path.
func (p *Pool) openManifest(ctx context.Context, name, path string) (*File, error) {
	m, err := p.manifest(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, p.explain(ctx, err))
	}
	if err := p.checkPacks(ctx, path, m); err != nil {
		return nil, err
	}
	p.learn(name, m)
	return &File{p: p, path: path, m: m}, nil
}

// checkPacks checks that the packs m uses exist, asking S3 about up to
// readers of them at once: a missing one is fs.ErrNotExist. A pack whose
// chunks of m are all in the local cache is not asked about: every read
// of the file is served from the cache, checked there as every read
// from it is, so S3 is not needed, and a file read before opens and reads
// at the cache's speed while S3 does not answer (issue 26: each such open
// waited out OpTimeout).
func (p *Pool) checkPacks(ctx context.Context, path string, m *Manifest) error {
	packs := map[string]bool{}
	for _, c := range m.Chunks {
		if !packs[c.Pack] && (p.cache == nil || !p.cache.Has(c.Sum)) {
			packs[c.Pack] = true // needed: a chunk of it is not cached
		}
	}
	errs := make(chan error, len(packs))
	sem := make(chan struct{}, readers)
	for pack := range packs {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			octx, cancel := p.op(ctx)
			_, err := p.objs.Stat(octx, packDir+pack)
			cancel()
			switch {
			case errors.Is(err, ErrNoObject):
				p.forgetPack(pack)
				err = fmt.Errorf("open %s: pack %s is missing from the pool: %w", path, pack, fs.ErrNotExist)
			case err != nil:
				err = fmt.Errorf("open %s: %w", path, p.explain(ctx, err))
			}
			errs <- err
		}()
	}
	var first error
	for range packs {
		if err := <-errs; err != nil && (first == nil || errors.Is(err, fs.ErrNotExist)) {
			first = err // a missing pack says more than a slow service
		}
	}
	return first
}

// manifest reads and checks a manifest object.
func (p *Pool) manifest(ctx context.Context, name string) (*Manifest, error) {
	p.mu.Lock()
	m, ok := p.manifests[name]
	p.mu.Unlock()
	if ok {
		return m, nil
	}
	if !isHash(name) {
		return nil, fmt.Errorf("name points to %q, not a manifest hash: %w: %w", name, errNotManifest, syscall.EIO)
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	st, err := p.objs.Stat(octx, manifestDir+name)
	if errors.Is(err, ErrNoObject) {
		return nil, fmt.Errorf("manifest %s is missing from the pool: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	if st.Size > maxManifestBytes {
		return nil, fmt.Errorf("manifest %s: %d bytes, over the limit: %w", name, st.Size, syscall.EIO)
	}
	b, err := p.objs.ReadRange(octx, manifestDir+name, 0, st.Size)
	if errors.Is(err, ErrNoObject) {
		return nil, fmt.Errorf("manifest %s is missing from the pool: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != name {
		return nil, fmt.Errorf("manifest %s: %w: %w", name, errCorrupt, syscall.EIO)
	}
	m, err = DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w: %w", name, err, syscall.EIO)
	}
	return m, nil
}

// settledManifest is manifest for the collector, the evictor and the
// repacker, which pass over a name whose manifest is damaged (unreadable):
// a manifest whose bytes do not match its hash is read twice more before
// it counts as damaged, so that one bad read (a bit flipped on the way,
// or in this host's memory) never costs a name its objects.
func (p *Pool) settledManifest(ctx context.Context, name string) (*Manifest, error) {
	m, err := p.manifest(ctx, name)
	for i := 0; i < 2 && errors.Is(err, errCorrupt); i++ {
		m, err = p.manifest(ctx, name)
	}
	return m, err
}

// ReadAt reads len(b) bytes at off; at the end of the file it returns
// what there is and io.EOF.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	return f.ReadAtContext(context.Background(), b, off)
}

// ReadAtContext is ReadAt with a context.
func (f *File) ReadAtContext(ctx context.Context, b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset %d", f.path, off)
	}
	end := min(off+int64(len(b)), f.m.Size)
	if off >= end {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	first, start := f.m.chunkAt(off)
	last, _ := f.m.chunkAt(end - 1)
	chunks := make([][]byte, last-first+1)
	if err := f.fetch(ctx, first, chunks); err != nil {
		return 0, fmt.Errorf("read %s at %d: %w", f.path, off, err)
	}
	n := 0
	for k, data := range chunks {
		from := int64(0)
		if k == 0 {
			from = off - start
		}
		if want := f.m.Chunks[first+k].Len; int64(len(data)) != want || from > want {
			// Every source checks this (Pool.chunk); a slip here would
			// place later chunks at wrong offsets.
			return 0, fmt.Errorf("read %s at %d: chunk %d: %d bytes, want %d: %w", f.path, off, first+k, len(data), want, syscall.EIO)
		}
		n += copy(b[n:], data[from:])
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// readers is how many chunks one read fetches at once, and how many
// packs an open asks about at once.
const readers = 8

// fetch fills out with chunks first, first+1, ...: the one the file read
// last from memory (reads smaller than a chunk come in runs), the others
// from the cache or the pool, up to readers at a time.
func (f *File) fetch(ctx context.Context, first int, out [][]byte) error {
	waits := make([]*pending, len(out))
	f.mu.Lock()
	if f.last.data != nil && f.last.i >= first && f.last.i < first+len(out) {
		out[f.last.i-first] = f.last.data
	}
	for i, pd := range f.ahead {
		switch {
		case i >= first && i < first+len(out):
			if out[i-first] == nil {
				waits[i-first] = pd
			}
			delete(f.ahead, i)
		case i < first:
			delete(f.ahead, i) // passed over
		}
	}
	// Sequential: this read starts where the last ended, or in its last
	// chunk (reads smaller than a chunk); a first read is not, so that a
	// reader of a few headers (a publish parsing its parent) does not
	// fetch the file ahead of it.
	sequential := f.next > 0 && (first == f.next || first == f.next-1)
	f.next = first + len(out)
	f.mu.Unlock()
	for k, pd := range waits {
		if pd == nil {
			continue
		}
		select {
		case <-pd.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if pd.err == nil {
			out[k] = pd.data
		} // else fetched again below, which reports its own error
	}
	if sequential {
		f.readAhead(first + len(out))
	}
	var missing []int
	for k := range out {
		if out[k] == nil {
			missing = append(missing, first+k)
		}
	}
	errs := make([]error, len(out))
	sem := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for _, run := range f.runs(missing) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			data, rerrs := f.fetchRun(ctx, run)
			for j, i := range run {
				out[i-first], errs[i-first] = data[j], rerrs[j]
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.mu.Lock()
	f.last.i, f.last.data = first+len(out)-1, out[len(out)-1]
	f.mu.Unlock()
	return nil
}

// maxRunBytes is the most bytes one GET of a run of chunks reads.
const maxRunBytes = 8 << 20

// maxRunGap is the most bytes between two chunks of a pack that one GET
// reads and drops rather than making two GETs.
const maxRunGap = 64 << 10

// runs groups chunks idx (indexes into f's chunks) into runs that one
// ranged GET reads: chunks of one pack, by offset, no more than
// maxRunGap apart, of up to maxRunBytes from the first's start to the
// last's end. A file cut where its rows end (a transposed V's channel
// runs: chunks of a few hundred bytes, each row's from the pack of the
// save that added it) reads thousands of chunks per MiB, which one GET
// each made reads of 64 KiB take 100 ms, and a cold read of 13 MB
// 98,371 GETs (red team).
func (f *File) runs(idx []int) [][]int {
	sorted := slices.Clone(idx)
	slices.SortFunc(sorted, func(a, b int) int {
		x, y := f.m.Chunks[a], f.m.Chunks[b]
		return cmp.Or(strings.Compare(x.Pack, y.Pack), cmp.Compare(x.Off, y.Off))
	})
	var out [][]int
	for _, i := range sorted {
		if n := len(out); n > 0 {
			run := out[n-1]
			a, z, c := f.m.Chunks[run[0]], f.m.Chunks[run[len(run)-1]], f.m.Chunks[i]
			if c.Pack == z.Pack && c.Off >= z.Off+z.Len && c.Off-(z.Off+z.Len) <= maxRunGap && c.Off+c.Len-a.Off <= maxRunBytes {
				out[n-1] = append(run, i)
				continue
			}
		}
		out = append(out, []int{i})
	}
	return out
}

// fetchRun returns the bytes of a run of f's chunks (runs), each
// checked: those in the cache from it, the others with one GET for each
// stretch of them. A chunk that the GET did not return whole and right
// is fetched alone (File.chunk), whose error is then that chunk's own.
func (f *File) fetchRun(ctx context.Context, run []int) ([][]byte, []error) {
	data := make([][]byte, len(run))
	errs := make([]error, len(run))
	var todo []int // positions in run not in the cache
	for j, i := range run {
		c := f.m.Chunks[i]
		if f.p.cache != nil {
			if b, ok := f.p.cache.Get(c.Sum); ok && int64(len(b)) == c.Len {
				data[j] = b
				continue
			}
		}
		todo = append(todo, j)
	}
	for len(todo) > 0 {
		// A stretch: positions next to each other in run (by offset in
		// the pack, gaps of up to maxRunGap between them).
		n := 1
		for n < len(todo) && todo[n] == todo[n-1]+1 {
			n++
		}
		stretch := todo[:n]
		todo = todo[n:]
		if len(stretch) > 1 {
			a, z := f.m.Chunks[run[stretch[0]]], f.m.Chunks[run[stretch[n-1]]]
			octx, cancel := f.p.op(ctx)
			b, err := f.p.objs.ReadRange(octx, packDir+a.Pack, a.Off, z.Off+z.Len-a.Off)
			cancel()
			if err == nil {
				for _, j := range stretch {
					c := f.m.Chunks[run[j]]
					at := c.Off - a.Off
					if int64(len(b)) < at+c.Len || sha256.Sum256(b[at:at+c.Len]) != c.Sum {
						continue
					}
					cb := b[at : at+c.Len : at+c.Len] // the run's buffer is this read's alone
					f.p.checked(c)
					if f.p.cache != nil {
						f.p.cache.AddLater(c.Sum, cb)
					}
					data[j] = cb
				}
			}
		}
		for _, j := range stretch {
			if data[j] == nil {
				data[j], errs[j] = f.chunk(ctx, f.m.Chunks[run[j]])
			}
		}
	}
	return data, errs
}

// readAhead starts fetching the chunks from index from on, up to
// aheadBytes (and aheadChunks at least) in flight or held, a run of
// chunks next to each other in a pack with one GET. A fetch outlives the
// read that started it (each call to S3 is bounded by OpTimeout); one
// that fails is fetched again by the read that needs it, which reports
// the error.
func (f *File) readAhead(from int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ahead == nil {
		f.ahead = map[int]*pending{}
		f.aheadSem = make(chan struct{}, readers)
	}
	var held int64
	for i := range f.ahead {
		held += f.m.Chunks[i].Len
	}
	var idx []int
	for i := from; i < len(f.m.Chunks) && len(f.ahead)+len(idx) < maxAheadChunks &&
		(len(f.ahead)+len(idx) < aheadChunks || held < aheadBytes); i++ {
		if f.ahead[i] != nil {
			continue
		}
		idx = append(idx, i)
		held += f.m.Chunks[i].Len
	}
	for _, run := range f.runs(idx) {
		pds := make([]*pending, len(run))
		for j, i := range run {
			pds[j] = &pending{done: make(chan struct{})}
			f.ahead[i] = pds[j]
		}
		go func() {
			f.aheadSem <- struct{}{}
			defer func() { <-f.aheadSem }()
			data, errs := f.fetchRun(context.Background(), run)
			for j, pd := range pds {
				pd.data, pd.err = data[j], errs[j]
				close(pd.done)
			}
		}()
	}
}

// chunk returns a chunk's bytes, checked against its sha256.
func (p *Pool) chunk(ctx context.Context, c ChunkRef) ([]byte, error) {
	if p.cache != nil {
		if b, ok := p.cache.Get(c.Sum); ok {
			if int64(len(b)) != c.Len {
				// The sum names these bytes, whose length the manifest
				// contradicts: the manifest lies (it came from another
				// host, or anyone who can write to the bucket).
				return nil, fmt.Errorf("chunk %x: %d bytes, the manifest says %d: %w: %w", c.Sum, len(b), c.Len, errCorrupt, syscall.EIO)
			}
			return b, nil
		}
	}
	octx, cancel := p.op(ctx)
	b, err := p.objs.ReadRange(octx, packDir+c.Pack, c.Off, c.Len)
	cancel()
	if errors.Is(err, ErrNoObject) {
		p.forgetPack(c.Pack)
		return nil, fmt.Errorf("chunk %x: pack %s is missing from the pool: %w: %w", c.Sum, c.Pack, errPackGone, syscall.EIO)
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %x: %w: %w", c.Sum, p.explain(ctx, err), syscall.EIO)
	}
	if sha256.Sum256(b) != c.Sum {
		return nil, fmt.Errorf("chunk %x in pack %s at %d: %w: %w", c.Sum, c.Pack, c.Off, errCorrupt, syscall.EIO)
	}
	p.checked(c)
	if p.cache != nil {
		p.cache.AddLater(c.Sum, b)
	}
	return b, nil
}

// errPackGone marks a chunk whose pack is missing from the pool.
var errPackGone = errors.New("pack gone")

// chunk is Pool.chunk for a chunk of f. Its pack may have gone since f
// was opened because a collection rewrote it (copied its live chunks into
// a new pack and moved the names): the chunk is its hash, so a copy where
// f's name now places it serves, checked.
func (f *File) chunk(ctx context.Context, c ChunkRef) ([]byte, error) {
	b, err := f.p.chunk(ctx, c)
	if errors.Is(err, errPackGone) {
		if b, ok := f.p.chunkElsewhere(ctx, c, f.path); ok {
			return b, nil
		}
	}
	return b, err
}

// chunkElsewhere reads chunk c from where the current manifest of path
// places it, if that is another pack (what this host learned from other
// manifests may be older than the rewrite, so it is not asked).
func (p *Pool) chunkElsewhere(ctx context.Context, c ChunkRef, path string) ([]byte, bool) {
	octx, cancel := p.op(ctx)
	resp, err := p.coord.cli.Get(octx, p.coord.namesKey(path))
	cancel()
	if err != nil || len(resp.Kvs) == 0 {
		return nil, false
	}
	m, err := p.manifest(ctx, string(resp.Kvs[0].Value))
	if err != nil {
		return nil, false
	}
	p.learn(string(resp.Kvs[0].Value), m)
	var l *ChunkRef
	for i := range m.Chunks {
		if m.Chunks[i].Sum == c.Sum && m.Chunks[i].Pack != c.Pack {
			l = &m.Chunks[i]
			break
		}
	}
	if l == nil {
		return nil, false
	}
	octx, cancel = p.op(ctx)
	b, err := p.objs.ReadRange(octx, packDir+l.Pack, l.Off, l.Len)
	cancel()
	if err != nil || sha256.Sum256(b) != c.Sum {
		return nil, false
	}
	if p.cache != nil {
		if err := p.cache.Add(c.Sum, b); err != nil {
			p.log.Warn("pool: chunk not cached", "err", err)
		}
	}
	return b, true
}

// List returns the pool's file names under prefix, sorted.
func (p *Pool) List(ctx context.Context, prefix string) ([]string, error) {
	octx, cancel := p.op(ctx)
	defer cancel()
	names, _, err := p.coord.names(octx, prefix, 0)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(names))
	bad := 0
	for n := range names {
		// Anyone with access to etcd can write any key: a name that no
		// publish could have made (empty parts, . or .., NUL) would
		// show as a strange entry in a listing, or a loop of them.
		if checkPath(n) != nil {
			bad++
			continue
		}
		out = append(out, n)
	}
	if bad > 0 {
		p.mu.Lock()
		say := bad != p.badNames
		p.badNames = bad
		p.mu.Unlock()
		if say { // once per change, not at every listing (a mount lists every second)
			p.log.Warn("pool: names that are not pool paths left out of listings", "count", bad)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Stat returns a pool file's size: its manifest, read once per manifest
// (they are immutable), without checking that its packs exist (Open does).
func (p *Pool) Stat(ctx context.Context, path string) (int64, error) {
	_, size, err := p.Resolve(ctx, path)
	return size, err
}
