package pool

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfs/kvfs/store"
)

// Publish stores size bytes read from r as the pool file path, following
// the protocol in doc.go: a publish key first, then the objects (new
// chunks in pack objects, reused ones verified), then the name, in a
// transaction that requires the publish key. Chunks this host knows to be
// in the pool are not uploaded again. A publish whose lease expired
// starts over (r is read again), at most three times.
func (p *Pool) Publish(ctx context.Context, path string, r io.ReaderAt, size int64) error {
	_, err := p.PublishVersion(ctx, path, r, size)
	return err
}

// PublishVersion is Publish, returning the manifest the name now points
// to (see Resolve).
func (p *Pool) PublishVersion(ctx context.Context, path string, r io.ReaderAt, size int64) (string, error) {
	return p.PublishOwned(ctx, path, r, size, nil)
}

// PublishOwned is PublishVersion recording o as the file's owner and
// mode (owner.go), in the transaction that sets the name. With o nil the
// name keeps the owner it has (none for a new name: the file shows as the
// mount's daemon's, 0644).
func (p *Pool) PublishOwned(ctx context.Context, path string, r io.ReaderAt, size int64, o *Owner) (string, error) {
	if err := checkPath(path); err != nil {
		return "", err
	}
	if size < 0 || size > maxFileSize {
		return "", fmt.Errorf("publish %s: size %d out of range", path, size)
	}
	snap := snapInfo(r, size, path)
	var name string
	var err error
	for range 3 {
		if name, err = p.publishOnce(ctx, path, r, size, snap, o); !errors.Is(err, ErrLeaseLost) {
			break
		}
		p.log.Warn("pool: publish lost its etcd lease; starting over", "path", path)
	}
	if err != nil {
		return "", fmt.Errorf("publish %s: %w", path, p.explain(ctx, err))
	}
	return name, nil
}

// explain adds to an error of a call that ran out of time that the
// service did not answer: the usual cause is a service that is down.
func (p *Pool) explain(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("%w (no answer within %v: is the service up and reachable?)", err, p.opTimeout)
	}
	return err
}

// checkPath refuses names that cannot be pool paths.
func checkPath(path string) error {
	if path == "" || strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") || strings.Contains(path, "//") ||
		strings.ContainsRune(path, 0) {
		return fmt.Errorf("pool path %q: want a relative path without empty parts", path)
	}
	for _, part := range strings.Split(path, "/") {
		if part == "." || part == ".." {
			return fmt.Errorf("pool path %q: no . or .. parts", path)
		}
		if len(part) > maxNameLen {
			return fmt.Errorf("pool path %q: a part of %d bytes, over the %d a file name may have", path, len(part), maxNameLen)
		}
	}
	return nil
}

// maxNameLen is the longest part of a pool path: NAME_MAX, what a
// directory entry may hold on Linux and macOS, so that every name can be
// listed and opened through a mount.
const maxNameLen = 255

// publishing is one attempt's state: the pack being filled and what this
// attempt uploaded or verified (only that counts: see doc.go).
type publishing struct {
	p        *Pool
	pack     bytes.Buffer
	packRefs []int // indexes into m.Chunks of the chunks in pack
	m        Manifest
	verified map[string]bool  // packs uploaded or found during this attempt
	fresh    map[[32]byte]loc // chunks uploaded (or being uploaded) during this attempt
	pending  map[[32]byte]int // chunk in the open pack → its first ref

	// Packs upload in the background, up to uploadsInFlight at once,
	// while the next ones fill: wait collects them before the manifest
	// goes up.
	uploads   sync.WaitGroup
	slots     chan struct{}
	uploadMu  sync.Mutex
	uploadErr error
}

// maxPublishChunks bounds a manifest's chunks: at about 170 bytes each
// in JSON, within maxManifestBytes (a file of about 180 GB cut by content
// at the default chunk size).
const maxPublishChunks = 360_000

// errTooManyChunks: a cut passed maxPublishChunks.
var errTooManyChunks = errors.New("too many chunks for a manifest")

// uploadsInFlight is how many packs one publish uploads at once.
const uploadsInFlight = 2

// wait waits for the packs being uploaded, and returns the first error.
func (w *publishing) wait() error {
	w.uploads.Wait()
	w.uploadMu.Lock()
	defer w.uploadMu.Unlock()
	return w.uploadErr
}

func (p *Pool) publishOnce(ctx context.Context, path string, r io.ReaderAt, size int64, snap *SnapInfo, o *Owner) (string, error) {
	octx, cancel := p.op(ctx)
	sess, err := p.coord.session(octx)
	cancel()
	if err != nil {
		return "", err
	}
	key, err := p.coord.beginPublish(ctx, sess, p.opTimeout)
	if err != nil {
		return "", err
	}
	defer func() {
		dctx, cancel := p.op(context.WithoutCancel(ctx))
		defer cancel()
		p.coord.cli.Delete(dctx, key)
	}()

	crashPoint("begun")
	names := p.learnNames(ctx)
	w := &publishing{p: p, verified: map[string]bool{}, fresh: map[[32]byte]loc{}}
	defer w.wait() // no upload outlives its attempt (before the key goes)
	// The file is cut as a local store cuts it (store.Cut): rows that
	// grow with the tokens, cut where the parent's chunks end, so that a
	// prefix-growth series shares its rows whichever host publishes
	// each snapshot; bytes of no such format by content.
	cut := func(withParent bool) (store.Lineage, error) {
		w.m = Manifest{V: 2, Size: size, Snap: snap}
		w.pack.Reset()
		w.packRefs = w.packRefs[:0]
		w.pending = map[[32]byte]int{}
		opt := store.CutOptions{ChunkSize: p.chunkSize, Fixed: p.fixed, Path: path, Log: p.log}
		if withParent {
			opt.Parent = func(l store.Lineage) *store.CutParent { return p.parentOf(ctx, l, names) }
		}
		return store.Cut(ctx, r, size, opt, func(chunks []store.Chunk, base int64, data []byte) error {
			select {
			case <-sess.Done():
				p.coord.dropSession(sess)
				return ErrLeaseLost
			default:
			}
			if len(w.m.Chunks)+len(chunks) > p.maxChunks {
				return errTooManyChunks
			}
			if err := w.checkReuse(ctx, chunks); err != nil {
				return err
			}
			for _, c := range chunks {
				if err := w.add(ctx, c.Sum, data[c.Off-base:c.Off-base+c.Len]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	lin, err := cut(true)
	if errors.Is(err, errTooManyChunks) {
		// A row cut where its parent's chunks end gains a chunk each
		// generation (a transposed V's channel runs: one per channel
		// per save), and a long conversation's manifest outgrew what a
		// manifest may hold: this file is cut afresh, without a parent,
		// into chunks as many as its rows need, and its children start
		// from it. What the first cut uploaded serves the second (fresh).
		p.log.Info("pool: a file's chunks past the manifest's bound when cut at its parent's; cut without one", "path", path, "chunks", p.maxChunks)
		if err := w.wait(); err != nil {
			return "", err
		}
		lin, err = cut(false)
		if errors.Is(err, errTooManyChunks) {
			err = fmt.Errorf("a file of %d bytes needs more than %d chunks of at most %d bytes, more than a manifest holds: %w", size, p.maxChunks, p.chunkSize, err)
		}
	}
	if err != nil {
		return "", err
	}
	w.m.Lineage = lineageInfo(lin)
	w.m.index()
	if err := w.flush(ctx); err != nil {
		w.wait()
		return "", err
	}
	if err := w.wait(); err != nil {
		return "", err
	}
	crashPoint("packs")
	name, b, err := w.m.Encode()
	if err != nil {
		return "", err
	}
	octx, cancel = p.op(ctx)
	err = p.objs.Put(octx, manifestDir+name, bytes.NewReader(b), int64(len(b)))
	cancel()
	if err != nil {
		return "", err
	}
	crashPoint("manifest")
	octx, cancel = p.op(ctx)
	err = p.coord.commitName(octx, key, path, name, o)
	cancel()
	if errors.Is(err, ErrLeaseLost) {
		p.coord.dropSession(sess)
	}
	if err != nil {
		return "", err
	}
	crashPoint("named")
	p.learn(name, &w.m)
	for _, c := range w.m.Chunks {
		p.checked(c) // uploaded, or checked before its reuse
	}
	return name, nil
}

// add appends one chunk, b of sha256 sum, to the manifest: a reference
// to a copy the pool holds (verified during this attempt), or new bytes
// in the open pack.
func (w *publishing) add(ctx context.Context, sum [32]byte, b []byte) error {
	ref := ChunkRef{Sum: sum, Len: int64(len(b))}
	if l, ok := w.fresh[sum]; ok {
		ref.Pack, ref.Off = l.pack, l.off
		w.m.Chunks = append(w.m.Chunks, ref)
		return nil
	}
	if i, ok := w.pending[sum]; ok {
		ref.Off = w.m.Chunks[i].Off
		w.packRefs = append(w.packRefs, len(w.m.Chunks))
		w.m.Chunks = append(w.m.Chunks, ref)
		return nil
	}
	w.p.mu.Lock()
	l, known := w.p.known[sum]
	w.p.mu.Unlock()
	if known {
		ok, err := w.verify(ctx, l.pack)
		if err == nil && ok && !l.checked {
			ok, err = w.reuse(ctx, sum, l, int64(len(b)))
		}
		if err != nil {
			return err
		}
		if ok {
			ref.Pack, ref.Off = l.pack, l.off
			w.m.Chunks = append(w.m.Chunks, ref)
			return nil
		}
	}
	ref.Off = int64(w.pack.Len())
	w.pending[sum] = len(w.m.Chunks)
	w.packRefs = append(w.packRefs, len(w.m.Chunks))
	w.m.Chunks = append(w.m.Chunks, ref)
	w.pack.Write(b)
	if int64(w.pack.Len()) >= w.p.packBytes {
		return w.flush(ctx)
	}
	return nil
}

// verify reports whether a pack object this host knew of is still in
// the pool, asking S3 once per attempt. A pack gone is forgotten.
func (w *publishing) verify(ctx context.Context, pack string) (bool, error) {
	if ok, seen := w.verified[pack]; seen {
		return ok, nil
	}
	octx, cancel := w.p.op(ctx)
	_, err := w.p.objs.Stat(octx, packDir+pack)
	cancel()
	switch {
	case err == nil:
		w.verified[pack] = true
		return true, nil
	case errors.Is(err, ErrNoObject):
		w.verified[pack] = false
		w.p.forgetPack(pack)
		return false, nil
	}
	return false, err
}

// reuse checks, once per process, a chunk's place that this host knows
// only from a manifest: it reads the range and hashes it. A manifest
// that lies about a chunk's place (written by a faulty host, or by anyone
// who can write to the bucket and etcd), or a pack damaged in the store,
// would otherwise make every later publish of that chunk, by every honest
// host, point at bytes that are not it: files that publish without an
// error and never read back. A place that does not hold the chunk is
// forgotten, and the chunk is uploaded anew.
func (w *publishing) reuse(ctx context.Context, sum [32]byte, l loc, n int64) (bool, error) {
	if l.len == n {
		octx, cancel := w.p.op(ctx)
		b, err := w.p.objs.ReadRange(octx, packDir+l.pack, l.off, n)
		cancel()
		if err == nil && sha256.Sum256(b) == sum {
			w.p.checked(ChunkRef{Sum: sum, Pack: l.pack, Off: l.off, Len: n})
			return true, nil
		}
		if err != nil && !errors.Is(err, ErrNoObject) {
			return false, err
		}
	}
	w.misplaced(sum, l)
	return false, nil
}

// misplaced forgets a place that does not hold the chunk a manifest said
// it does: the chunk is uploaded anew.
func (w *publishing) misplaced(sum [32]byte, l loc) {
	w.p.mu.Lock()
	if cur, ok := w.p.known[sum]; ok && cur.pack == l.pack && cur.off == l.off {
		delete(w.p.known, sum)
	}
	w.p.mu.Unlock()
	w.p.log.Warn("pool: a manifest places a chunk where its bytes are not; it is uploaded again",
		"chunk", hex.EncodeToString(sum[:]), "pack", l.pack, "off", l.off, "len", l.len)
}

// checkReuse checks the places of a batch's chunks that this host knows
// only from a manifest (reuse) before add takes them one by one: a file
// whose rows another host published reuses thousands of such chunks,
// which add would check one GET after another. Chunks that lie next to
// each other in a pack are read with one ranged GET of up to
// maxCheckRun bytes, up to readers GETs at a time.
func (w *publishing) checkReuse(ctx context.Context, chunks []store.Chunk) error {
	type check struct {
		sum [32]byte
		l   loc
	}
	var checks []check
	seen := map[[32]byte]bool{}
	for _, c := range chunks {
		if seen[c.Sum] {
			continue
		}
		seen[c.Sum] = true
		if _, ok := w.fresh[c.Sum]; ok {
			continue
		}
		if _, ok := w.pending[c.Sum]; ok {
			continue
		}
		w.p.mu.Lock()
		l, known := w.p.known[c.Sum]
		w.p.mu.Unlock()
		if !known || l.checked || l.len != c.Len {
			continue // add uploads it, or has nothing to check
		}
		ok, err := w.verify(ctx, l.pack)
		if err != nil {
			return err
		}
		if ok {
			checks = append(checks, check{c.Sum, l})
		}
	}
	if len(checks) < 2 {
		return nil // add checks it
	}
	slices.SortFunc(checks, func(a, b check) int {
		return cmp.Or(strings.Compare(a.l.pack, b.l.pack), cmp.Compare(a.l.off, b.l.off))
	})
	var runs [][]check
	for i, c := range checks {
		if i > 0 {
			run := runs[len(runs)-1]
			first, last := run[0].l, run[len(run)-1].l
			if c.l.pack == last.pack && c.l.off == last.off+last.len && c.l.off+c.l.len-first.off <= maxCheckRun {
				runs[len(runs)-1] = append(run, c)
				continue
			}
		}
		runs = append(runs, []check{c})
	}
	errs := make(chan error, len(runs))
	sem := make(chan struct{}, readers)
	for _, run := range runs {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			first, last := run[0].l, run[len(run)-1].l
			octx, cancel := w.p.op(ctx)
			b, err := w.p.objs.ReadRange(octx, packDir+first.pack, first.off, last.off+last.len-first.off)
			cancel()
			if err != nil && !errors.Is(err, ErrNoObject) {
				errs <- err
				return
			}
			for _, c := range run {
				at := c.l.off - first.off
				if err == nil && int64(len(b)) >= at+c.l.len && sha256.Sum256(b[at:at+c.l.len]) == c.sum {
					w.p.checked(ChunkRef{Sum: c.sum, Pack: c.l.pack, Off: c.l.off, Len: c.l.len})
					continue
				}
				w.misplaced(c.sum, c.l)
			}
			errs <- nil
		}()
	}
	var first error
	for range runs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// maxCheckRun is the most bytes checkReuse reads with one GET.
const maxCheckRun = 8 << 20

// flush uploads the open pack, if it holds anything.
func (w *publishing) flush(ctx context.Context) error {
	if w.pack.Len() == 0 {
		return nil
	}
	w.uploadMu.Lock()
	err := w.uploadErr
	w.uploadMu.Unlock()
	if err != nil {
		return err // an upload failed: the attempt fails
	}
	body := bytes.Clone(w.pack.Bytes())
	sum := sha256.Sum256(body)
	name := hex.EncodeToString(sum[:])
	for _, i := range w.packRefs {
		c := &w.m.Chunks[i]
		c.Pack = name
		w.fresh[c.Sum] = loc{pack: name, off: c.Off, len: c.Len}
	}
	// Counted as verified now: the manifest goes up only once every
	// upload of the attempt has succeeded (wait).
	w.verified[name] = true
	w.pack.Reset()
	w.packRefs = w.packRefs[:0]
	clear(w.pending)
	if w.slots == nil {
		w.slots = make(chan struct{}, uploadsInFlight)
	}
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.uploads.Add(1)
	go func() {
		defer func() { <-w.slots; w.uploads.Done() }()
		octx, cancel := w.p.op(ctx)
		err := w.p.objs.Put(octx, packDir+name, bytes.NewReader(body), int64(len(body)))
		cancel()
		if err == nil {
			crashPoint("pack")
		}
		if err != nil {
			w.uploadMu.Lock()
			if w.uploadErr == nil {
				w.uploadErr = err
			}
			w.uploadMu.Unlock()
		}
	}()
	return nil
}

// learn records the chunks of a manifest this host published or read,
// and the manifest in the host's index (knowledge.go).
func (p *Pool) learn(name string, m *Manifest) {
	if p.remember(name, m) && p.know != nil {
		if err := p.know.add(name, m); err != nil {
			p.log.Warn("pool: manifest not kept in the local index", "manifest", name, "err", err)
		}
	}
}

// remember is learn in memory only; it reports whether name was new.
// Past its bounds each map starts over (knowledge.go).
func (p *Pool) remember(name string, m *Manifest) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.manifests[name]; !ok {
		if len(p.manifests) >= maxCachedManifests || p.manifestBytes+m.memBytes() > maxCachedManifestBytes {
			clear(p.manifests)
			p.manifestBytes = 0
		}
		p.manifests[name] = m
		p.manifestBytes += m.memBytes()
	}
	if _, ok := p.snapOf[name]; !ok {
		// Kept apart from the manifests (a lookup lists every name's
		// record, and past maxCachedManifests each lookup read every
		// manifest again), within a budget of chain keys.
		n := 0
		if m.Snap != nil {
			n = len(m.Snap.Keys)
		}
		if len(p.snapOf) >= maxSeen || p.snapKeys+n > maxLineageKeys {
			clear(p.snapOf)
			p.snapKeys = 0
		}
		p.snapOf[name] = m.Snap
		p.snapKeys += n
	}
	if p.seen[name] {
		return false
	}
	if len(p.seen) >= maxSeen {
		clear(p.seen)
	}
	p.seen[name] = true
	if len(p.known) >= maxKnown {
		clear(p.known)
	}
	if m.Lineage != nil {
		if len(p.lineages) >= maxSeen || p.lineageKeys+len(m.Lineage.Keys) > maxLineageKeys {
			clear(p.lineages) // as the other maps do: dedup lost, never a wrong byte
			p.lineageKeys = 0
		}
		p.lineages[name] = m.Lineage
		p.lineageKeys += len(m.Lineage.Keys)
	}
	for _, c := range m.Chunks {
		if l, ok := p.known[c.Sum]; ok && l.checked {
			continue // a place checked beats a claim
		}
		p.known[c.Sum] = loc{pack: c.Pack, off: c.Off, len: c.Len}
	}
	return true
}

// checked records that chunk c's bytes were read at its place and
// matched its sum, or were uploaded there.
func (p *Pool) checked(c ChunkRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.known) >= maxKnown {
		clear(p.known)
	}
	p.known[c.Sum] = loc{pack: c.Pack, off: c.Off, len: c.Len, checked: true}
}

// learnNames reads the manifests of names this host has not seen, so
// that it reuses chunks other hosts published (a prefix series written
// through several hosts stores each chunk once). What it learns is only a
// hint: a publish verifies every pack it reuses. Failures only cost
// dedup, and are logged.
//
// All of it is bounded by one OpTimeout, and it stops at the first
// manifest that cannot be read for any reason but its absence: a
// publish must not wait names × OpTimeout behind a slow or stopped
// service (red team 23: a 2-byte file's close took 81 s with S3 stopped).
//
// It returns the names it listed (path → manifest), nil if it could not.
func (p *Pool) learnNames(ctx context.Context) map[string]string {
	lctx, cancel := context.WithTimeout(ctx, p.opTimeout)
	defer cancel()
	names, _, err := p.coord.names(lctx, "", 0)
	if err != nil {
		p.log.Warn("pool: names not read for dedup", "err", err)
		return nil
	}
	for _, name := range names {
		p.mu.Lock()
		seen := p.seen[name]
		p.mu.Unlock()
		if seen {
			continue
		}
		m, err := p.manifest(lctx, name)
		if err == nil {
			p.learn(name, m)
			continue
		}
		if lctx.Err() != nil || !(errors.Is(err, fs.ErrNotExist) || unreadable(err)) {
			p.log.Warn("pool: manifests not read for dedup", "err", err)
			return names
		}
	}
	return names
}

// forgetPack drops what this host knew of a pack that is gone.
func (p *Pool) forgetPack(pack string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for sum, l := range p.known {
		if l.pack == pack {
			delete(p.known, sum)
		}
	}
}

// Remove removes a pool file's name; its objects go at the next
// collection that finds no other name reaching them.
func (p *Pool) Remove(ctx context.Context, path string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	resp, err := p.coord.cli.Txn(octx).
		Then(clientv3.OpDelete(p.coord.namesKey(path)), clientv3.OpDelete(p.coord.usedKey(path)), clientv3.OpDelete(p.coord.attrsKey(path))).
		Commit()
	if err != nil {
		return fmt.Errorf("remove %s: etcd: %w", path, p.explain(ctx, err))
	}
	if resp.Responses[0].GetResponseDeleteRange().Deleted == 0 {
		return fmt.Errorf("remove %s: %w", path, fs.ErrNotExist)
	}
	return nil
}

// Rename moves a pool file's name, replacing what the new name was, in
// one etcd transaction (the manifest it points to is reachable from one of
// the two names at every moment, so a collection marks it either way).
func (p *Pool) Rename(ctx context.Context, from, to string) error {
	if err := checkPath(from); err != nil {
		return err
	}
	if err := checkPath(to); err != nil {
		return err
	}
	// A chmod (SetOwner) between the reading and the transaction fails
	// the transaction, which is then made again with the owner it set,
	// after a pause that grows: 20 times at most (190 ms of pauses).
	for attempt := 1; ; attempt++ {
		again, err := p.renameOnce(ctx, from, to)
		if !again || attempt == 20 {
			return err
		}
		time.Sleep(time.Duration(attempt) * time.Millisecond)
	}
}

// renameOnce is one attempt of Rename; again says that it failed only
// because from's owner changed meanwhile.
func (p *Pool) renameOnce(ctx context.Context, from, to string) (again bool, err error) {
	octx, cancel := p.op(ctx)
	defer cancel()
	resp, err := p.coord.cli.Txn(octx).Then(clientv3.OpGet(p.coord.namesKey(from)), clientv3.OpGet(p.coord.usedKey(from)),
		clientv3.OpGet(p.coord.attrsKey(from))).Commit()
	if err != nil {
		return false, fmt.Errorf("rename %s: etcd: %w", from, p.explain(ctx, err))
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, fmt.Errorf("rename %s: %w", from, fs.ErrNotExist)
	}
	kv := kvs[0]
	if from == to {
		return false, nil
	}
	// The time of last use moves with the name (evict.go).
	used := usedNow()
	if u := resp.Responses[1].GetResponseRange().Kvs; len(u) > 0 {
		used = string(u[0].Value)
	}
	// So does its owner (owner.go), as it was read with the name.
	owner := clientv3.OpDelete(p.coord.attrsKey(to))
	var ownerRev int64 // 0: none
	if a := resp.Responses[2].GetResponseRange().Kvs; len(a) > 0 {
		owner = clientv3.OpPut(p.coord.attrsKey(to), string(a[0].Value))
		ownerRev = a[0].ModRevision
	}
	tx, err := p.coord.cli.Txn(octx).
		If(append(p.coord.noConflict(to), clientv3.Compare(clientv3.ModRevision(p.coord.namesKey(from)), "=", kv.ModRevision),
			clientv3.Compare(clientv3.ModRevision(p.coord.attrsKey(from)), "=", ownerRev))...).
		Then(clientv3.OpPut(p.coord.namesKey(to), string(kv.Value)), clientv3.OpDelete(p.coord.namesKey(from)),
			clientv3.OpPut(p.coord.usedKey(to), used), clientv3.OpDelete(p.coord.usedKey(from)),
			owner, clientv3.OpDelete(p.coord.attrsKey(from))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("rename %s to %s: etcd: %w", from, to, p.explain(ctx, err))
	}
	if !tx.Succeeded {
		now, err := p.coord.cli.Txn(octx).Then(clientv3.OpGet(p.coord.namesKey(from)), clientv3.OpGet(p.coord.attrsKey(from))).Commit()
		if err == nil {
			n, a := now.Responses[0].GetResponseRange().Kvs, now.Responses[1].GetResponseRange().Kvs
			if len(n) > 0 && n[0].ModRevision == kv.ModRevision {
				if changed := len(a) > 0 && a[0].ModRevision != ownerRev || len(a) == 0 && ownerRev != 0; changed {
					return true, fmt.Errorf("rename %s to %s: its owner changed meanwhile", from, to)
				}
				return false, fmt.Errorf("rename %s to %s: %w", from, to, ErrNameConflict)
			}
		}
		return false, fmt.Errorf("rename %s to %s: it changed meanwhile: %w", from, to, fs.ErrExist)
	}
	return false, nil
}
