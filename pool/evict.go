package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// touchEvery is how often one host records a use of one name: a file
// read in a loop costs etcd one write a minute, not one per open. It is
// also the precision of the least-recently-used order across hosts.
const touchEvery = time.Minute

// maxTouched bounds the names whose last recorded use a host remembers;
// past it the memory starts over (a few extra writes).
const maxTouched = 1 << 16

// usedNow is the value of a used/<path> key for now: Unix seconds.
func usedNow() string { return strconv.FormatInt(time.Now().Unix(), 10) }

// touch records that path was used now (used/<path>), at most once per
// touchEvery from this host, and only while the name exists (so that a
// removal is not followed by a stray key). Failures cost only the order
// of eviction, and are logged.
func (p *Pool) touch(ctx context.Context, path string) {
	if p.etcd.isOpen() {
		return // an outage: the use is not recorded (eviction's order is a hint)
	}
	now := time.Now()
	p.mu.Lock()
	if last, ok := p.touched[path]; ok && now.Sub(last) < touchEvery {
		p.mu.Unlock()
		return
	}
	if len(p.touched) >= maxTouched {
		clear(p.touched)
	}
	p.touched[path] = now
	p.mu.Unlock()
	octx, cancel := p.op(ctx)
	defer cancel()
	_, err := p.coord.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(p.coord.namesKey(path)), ">", 0)).
		Then(clientv3.OpPut(p.coord.usedKey(path), usedNow())).
		Commit()
	if err != nil && !errors.Is(err, ErrEtcdDown) && !p.closed.Load() {
		p.log.Warn("pool: use of a file not recorded (eviction order)", "path", path, "err", err)
	}
}

// Saw records that path was seen to exist (a lookup, a stat) as a use,
// in the background: eviction passes over a name used within MinIdle, and
// an engine that found a block's name will list it in the manifest it
// publishes last (seen means kept, docs/DESIGN.md). Like every use, at most
// one a minute per name from this host is recorded, so MinIdle must exceed
// the longest snapshot write by a minute (the default, an hour, does).
func (p *Pool) Saw(path string) {
	go p.touch(context.Background(), path)
}

// EvictStats report a capacity eviction.
type EvictStats struct {
	LiveBefore int64 // bytes of the distinct chunks the names reach, before
	LiveAfter  int64 // and after the names evicted
	Names      int   // names evicted (or, in a dry run, to evict)
	Recent     int   // names not evicted, while still over capacity, for being used within MinIdle
	Changed    int   // names skipped for being published, used or removed meanwhile
}

// evictee is one name as eviction sees it.
type evictee struct {
	path, manifest string
	rev            int64 // the name's ModRevision
	used           int64 // Unix seconds of the last recorded use; 0: none
	usedRev        int64 // used/<path>'s ModRevision; 0: none
}

// evict removes names, least recently used first, while the bytes of the
// distinct chunks the names reach exceed capacity, passing over every name
// used within minIdle. A name is removed in a transaction that requires
// it and its last use to be as read, so that a name published or opened
// meanwhile stays. The objects of the names removed go at the sweep that
// follows (shared packs through the rewrite). A name without a recorded
// use (published by an older kvfs) counts as used long ago.
func (p *Pool) evict(ctx context.Context, capacity int64, minIdle time.Duration, dry bool) (EvictStats, error) {
	var st EvictStats
	octx, cancel := p.op(ctx)
	resp, err := p.coord.cli.Txn(octx).Then(
		clientv3.OpGet(p.coord.namesPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(p.coord.usedPrefix(), clientv3.WithPrefix())).Commit()
	cancel()
	if err != nil {
		return st, fmt.Errorf("evict: etcd: list names: %w", p.explain(ctx, err))
	}
	byPath := map[string]*evictee{}
	var all []*evictee
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		e := &evictee{path: string(kv.Key[len(p.coord.namesPrefix()):]), manifest: string(kv.Value), rev: kv.ModRevision}
		byPath[e.path] = e
		all = append(all, e)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if e := byPath[string(kv.Key[len(p.coord.usedPrefix()):])]; e != nil {
			e.used, _ = strconv.ParseInt(string(kv.Value), 10, 64)
			e.usedRev = kv.ModRevision
		}
	}
	// The distinct chunks each name reaches, and how many names reach
	// each chunk.
	refs := map[loc]int{}
	chunks := map[string][]loc{} // by manifest
	dangling := map[string]bool{}
	for _, e := range all {
		if _, ok := chunks[e.manifest]; ok {
			for _, l := range chunks[e.manifest] {
				refs[l]++
			}
			continue
		}
		m, err := p.settledManifest(ctx, e.manifest)
		if errors.Is(err, fs.ErrNotExist) || unreadable(err) {
			// Dangling: it reaches nothing, so removing it frees
			// nothing; the sweep's marking reports it.
			chunks[e.manifest] = nil
			dangling[e.manifest] = true
			continue
		}
		if err != nil {
			return st, fmt.Errorf("evict: name %s: %w", e.path, err)
		}
		seen := map[loc]bool{}
		var ls []loc
		for _, c := range m.Chunks {
			l := loc{pack: c.Pack, off: c.Off, len: c.Len}
			if !seen[l] {
				seen[l] = true
				ls = append(ls, l)
			}
		}
		chunks[e.manifest] = ls
		for _, l := range ls {
			refs[l]++
		}
	}
	for l := range refs {
		st.LiveBefore += l.len
	}
	st.LiveAfter = st.LiveBefore
	slices.SortFunc(all, func(a, b *evictee) int {
		// Uses within one second go in the order etcd recorded them.
		return cmp.Or(cmp.Compare(a.used, b.used), cmp.Compare(a.usedRev, b.usedRev), cmp.Compare(a.rev, b.rev))
	})
	cutoff := time.Now().Add(-minIdle).Unix()
	for _, e := range all {
		if st.LiveAfter <= capacity {
			break
		}
		if dangling[e.manifest] {
			continue
		}
		if e.used > cutoff {
			st.Recent++
			continue
		}
		if !dry {
			if p.beforeEvict != nil {
				p.beforeEvict(e.path)
			}
			ok, err := p.evictName(ctx, e)
			if err != nil {
				return st, err
			}
			if !ok {
				st.Changed++
				continue
			}
		}
		st.Names++
		for _, l := range chunks[e.manifest] {
			if refs[l]--; refs[l] == 0 {
				st.LiveAfter -= l.len
			}
		}
		p.log.Info("pool: evicted (least recently used, over capacity)", "path", e.path,
			"last_used", time.Unix(e.used, 0).UTC().Format(time.RFC3339), "dry_run", dry)
	}
	return st, nil
}

// evictName removes e's name and its last use if neither changed since
// they were read: ok false if one did.
func (p *Pool) evictName(ctx context.Context, e *evictee) (ok bool, err error) {
	usedCmp := clientv3.Compare(clientv3.ModRevision(p.coord.usedKey(e.path)), "=", e.usedRev)
	if e.usedRev == 0 {
		usedCmp = clientv3.Compare(clientv3.CreateRevision(p.coord.usedKey(e.path)), "=", 0)
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	resp, err := p.coord.cli.Txn(octx).
		If(clientv3.Compare(clientv3.ModRevision(p.coord.namesKey(e.path)), "=", e.rev), usedCmp).
		Then(clientv3.OpDelete(p.coord.namesKey(e.path)), clientv3.OpDelete(p.coord.usedKey(e.path)), clientv3.OpDelete(p.coord.attrsKey(e.path))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("evict %s: etcd: %w", e.path, p.explain(ctx, err))
	}
	return resp.Succeeded, nil
}
