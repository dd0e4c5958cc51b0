package pool

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RepackStats report the packs a collection rewrote.
type RepackStats struct {
	Packs       int   // sparse packs whose live chunks were copied
	CopiedBytes int64 // bytes of live chunks copied into new packs
	NewPacks    int   // packs uploaded to hold them
	Names       int   // names moved to manifests that use the new packs
	Skipped     int   // names that changed meanwhile (their packs stay live)
	Damaged     int   // sparse packs left as they are (a chunk of theirs is damaged or gone), and names not moved (another of their packs is gone)
}

// packUse is what the names reach of one pack object.
type packUse struct {
	size     int64
	modified time.Time
	live     int64              // bytes of the distinct chunks names reach
	chunks   map[int64]ChunkRef // by offset
}

// repack rewrites the sparse packs: those whose dead fraction (bytes no
// name reaches, over the pack's size) is at least threshold and that are
// older than grace. Their live chunks are copied into new packs, and each
// name whose manifest uses one moves to a manifest that uses the copies;
// the old packs are then reached by nothing, and the sweep that follows
// deletes them. A dry run only counts.
//
// A rewrite is a publish (doc.go): it holds a publish key while it uploads
// the new packs and verifies every old pack its new manifests keep, and
// moves each name in a transaction that requires the key and the name's
// old value (a name published or removed meanwhile keeps its new state,
// and the packs it uses stay live). So the argument for publishes covers
// it, and the collector runs it before its fence, as any host publishes.
func (p *Pool) repack(ctx context.Context, threshold float64, grace time.Duration, dry bool) (RepackStats, error) {
	var st RepackStats
	octx, cancel := p.op(ctx)
	names, _, err := p.coord.names(octx, "", 0)
	cancel()
	if err != nil {
		return st, fmt.Errorf("repack: %w", err)
	}
	manifests := map[string]*Manifest{}
	packs := map[string]*packUse{}
	for _, name := range names {
		if manifests[name] != nil {
			continue
		}
		m, err := p.settledManifest(ctx, name)
		if errors.Is(err, fs.ErrNotExist) || unreadable(err) {
			continue // a dangling name (the sweep's marking reports it) reaches nothing
		}
		if err != nil {
			// Unread, the packs it uses are not known: rewriting one
			// could leave that name on a pack the sweep then deletes.
			return st, fmt.Errorf("repack: manifest %s: %w", name, err)
		}
		manifests[name] = m
		for _, c := range m.Chunks {
			u := packs[c.Pack]
			if u == nil {
				u = &packUse{chunks: map[int64]ChunkRef{}}
				packs[c.Pack] = u
			}
			if _, ok := u.chunks[c.Off]; !ok {
				u.chunks[c.Off] = c
				u.live += c.Len
			}
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 10*p.opTimeout)
	err = p.objs.List(lctx, packDir, func(o ObjectInfo) error {
		if u := packs[strings.TrimPrefix(o.Name, packDir)]; u != nil {
			u.size, u.modified = o.Size, o.Modified
		}
		return nil
	})
	cancel()
	if err != nil {
		return st, fmt.Errorf("repack: %w", err)
	}
	now := time.Now()
	sparse := map[string]*packUse{}
	for name, u := range packs {
		// A pack not listed (size 0) is missing: reads of it fail, and
		// there is nothing to copy.
		if u.size == 0 || now.Sub(u.modified) < grace {
			continue
		}
		if dead := float64(u.size-u.live) / float64(u.size); dead >= threshold {
			sparse[name] = u
		}
	}
	if len(sparse) == 0 {
		return st, nil
	}
	if dry {
		for _, u := range sparse {
			st.Packs++
			st.CopiedBytes += u.live
		}
		st.NewPacks = int((st.CopiedBytes + p.packBytes - 1) / p.packBytes)
		return st, nil
	}
	err = p.rewrite(ctx, names, manifests, sparse, &st)
	if err != nil {
		return st, fmt.Errorf("repack: %w", err)
	}
	return st, nil
}

// rewrite copies the live chunks of the sparse packs into new packs and
// moves the names that use them, under one publish key (see repack).
func (p *Pool) rewrite(ctx context.Context, names map[string]string, manifests map[string]*Manifest, sparse map[string]*packUse, st *RepackStats) error {
	octx, cancel := p.op(ctx)
	sess, err := p.coord.session(octx)
	cancel()
	if err != nil {
		return err
	}
	key, err := p.coord.beginPublish(ctx, sess, p.opTimeout)
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := p.op(context.WithoutCancel(ctx))
		defer cancel()
		p.coord.cli.Delete(dctx, key)
	}()

	// Copy: each live chunk once, in pack and offset order, each checked
	// against its sha256 as it is read (Pool.chunk).
	moved := map[loc]loc{} // old place → new place
	var pack bytes.Buffer
	var pending []loc // old places of the chunks in pack
	flush := func() error {
		if pack.Len() == 0 {
			return nil
		}
		sum := sha256.Sum256(pack.Bytes())
		name := hex.EncodeToString(sum[:])
		octx, cancel := p.op(ctx)
		err := p.objs.Put(octx, packDir+name, bytes.NewReader(pack.Bytes()), int64(pack.Len()))
		cancel()
		if err != nil {
			return err
		}
		off := int64(0)
		for _, old := range pending {
			moved[old] = loc{pack: name, off: off, len: old.len}
			off += old.len
		}
		st.NewPacks++
		pack.Reset()
		pending = pending[:0]
		return nil
	}
packs:
	for _, name := range slices.Sorted(maps.Keys(sparse)) {
		u := sparse[name]
		refs := make([]ChunkRef, 0, len(u.chunks))
		for _, c := range u.chunks {
			refs = append(refs, c)
		}
		slices.SortFunc(refs, func(a, b ChunkRef) int { return cmp.Compare(a.Off, b.Off) })
		for _, c := range refs {
			select {
			case <-sess.Done():
				p.coord.dropSession(sess)
				return ErrLeaseLost
			default:
			}
			b, err := p.chunk(ctx, c)
			if errors.Is(err, errCorrupt) || errors.Is(err, errPackGone) {
				// A damaged or missing chunk: the pack stays as it is
				// (what was copied of it serves as any copy does), so
				// that one bad chunk does not stop every collection.
				p.log.Warn("pool: a sparse pack is not rewritten: one of its chunks cannot be read", "pack", name, "err", err)
				delete(sparse, name)
				st.Damaged++
				continue packs
			}
			if err != nil {
				return err
			}
			pending = append(pending, loc{pack: c.Pack, off: c.Off, len: c.Len})
			pack.Write(b)
			st.CopiedBytes += c.Len
			if int64(pack.Len()) >= p.packBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		st.Packs++
	}
	if err := flush(); err != nil {
		return err
	}

	// Move the names. Every pack a new manifest keeps is verified during
	// this attempt (doc.go: what a host knew before its key proves
	// nothing).
	verified := map[string]bool{}
	newName := map[string]string{} // old manifest → new; "": left as it is
names:
	for _, path := range slices.Sorted(maps.Keys(names)) {
		old := names[path]
		nm, done := newName[old]
		if done && nm == "" {
			continue
		}
		if !done {
			m := manifests[old]
			if m == nil || !usesAny(m, sparse) {
				continue
			}
			c := &Manifest{V: m.V, Size: m.Size, ChunkSize: m.ChunkSize, Chunks: slices.Clone(m.Chunks), Snap: m.Snap,
				Lineage: m.Lineage, ends: m.ends}
			for i := range c.Chunks {
				r := &c.Chunks[i]
				if to, ok := moved[loc{pack: r.Pack, off: r.Off, len: r.Len}]; ok {
					r.Pack, r.Off = to.pack, to.off
					continue
				}
				if !verified[r.Pack] {
					octx, cancel := p.op(ctx)
					_, err := p.objs.Stat(octx, packDir+r.Pack)
					cancel()
					if errors.Is(err, ErrNoObject) {
						// The name already misses a pack: it stays as
						// it is (its packs stay live), rather than
						// failing every collection.
						p.log.Warn("pool: a name is not moved off a sparse pack: another of its packs is missing", "path", path, "pack", r.Pack)
						newName[old] = ""
						st.Damaged++
						continue names
					}
					if err != nil {
						return fmt.Errorf("verify pack %s: %w", r.Pack, err)
					}
					verified[r.Pack] = true
				}
			}
			name, b, err := c.Encode()
			if err != nil {
				return err
			}
			octx, cancel := p.op(ctx)
			err = p.objs.Put(octx, manifestDir+name, bytes.NewReader(b), int64(len(b)))
			cancel()
			if err != nil {
				return err
			}
			p.learn(name, c)
			nm, newName[old] = name, name
		}
		octx, cancel := p.op(ctx)
		ok, err := p.coord.swapName(octx, key, path, old, nm)
		cancel()
		if errors.Is(err, ErrLeaseLost) {
			p.coord.dropSession(sess)
		}
		if err != nil {
			return err
		}
		if ok {
			st.Names++
		} else {
			st.Skipped++
		}
	}
	for name := range sparse {
		p.forgetPack(name)
	}
	return nil
}

// usesAny reports whether m has a chunk in one of packs.
func usesAny(m *Manifest, packs map[string]*packUse) bool {
	for _, c := range m.Chunks {
		if packs[c.Pack] != nil {
			return true
		}
	}
	return false
}

// swapName points path at manifest to if it points at from, in a
// transaction that requires publish key pubKey: ok false when the name
// changed or went meanwhile, ErrLeaseLost when the key is gone.
func (c *coord) swapName(ctx context.Context, pubKey, path, from, to string) (ok bool, err error) {
	k := c.namesKey(path)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(pubKey), ">", 0), clientv3.Compare(clientv3.Value(k), "=", from)).
		Then(clientv3.OpPut(k, to)).
		Else(clientv3.OpGet(pubKey, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return false, fmt.Errorf("etcd: move name %s: %w", path, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	if len(resp.Responses) == 0 || resp.Responses[0].GetResponseRange().Count == 0 {
		return false, ErrLeaseLost
	}
	return false, nil
}
