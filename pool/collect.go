package pool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// CollectOptions tune a collection.
type CollectOptions struct {
	// Grace: only objects older than this are deleted (0: 1 h). See
	// doc.go for what it covers.
	Grace time.Duration
	// DryRun finds what would be deleted and deletes nothing.
	DryRun bool
	// Threshold: before the sweep, rewrite the packs whose dead fraction
	// (bytes no name reaches over the pack's size) is at least this, and
	// that are older than Grace (repack.go); 0 rewrites none.
	Threshold float64
	// Capacity: before anything else, remove names, least recently used
	// first, until the distinct chunks the names reach take at most this
	// many bytes (evict.go); 0 removes none. MinIdle: never remove a name
	// used (published or opened, by any host) within this.
	Capacity int64
	MinIdle  time.Duration
	// Progress, if set, is told each object deleted.
	Progress func(name string, size int64)
}

// CollectStats report a collection.
type CollectStats struct {
	Names         int   // names marked from
	LiveObjects   int   // objects the names reach
	Deleted       int   // objects deleted (or, in a dry run, to delete)
	DeletedBytes  int64 //
	YoungKept     int   // unreached objects kept for the grace period
	DanglingNames int   // names whose manifest is missing
	Evict         EvictStats
	Repack        RepackStats
}

// ErrCollectorBusy is a collection refused because another host is
// collecting.
var ErrCollectorBusy = errors.New("another host is collecting this pool")

// Collect deletes the pool's objects that no name reaches, following the
// protocol in doc.go: mark from the names at revision R, fence new
// publishes, wait for in-flight ones, mark from the names again, delete
// unmarked objects older than the grace period, lift the fence. One host
// collects at a time (an etcd lock); while this host's lease is not
// alive, it stops deleting.
func (p *Pool) Collect(ctx context.Context, opts CollectOptions) (CollectStats, error) {
	if opts.Grace == 0 {
		opts.Grace = time.Hour
	}
	var st CollectStats
	// The collector's own session: its lease bounds the fence's life, and
	// losing it stops the sweep.
	octx, cancel := p.op(ctx)
	sess, err := p.coord.newSession(octx, ctx)
	cancel()
	if err != nil {
		return st, fmt.Errorf("collect: %w", err)
	}
	defer sess.Close()
	lock := concurrency.NewMutex(sess, p.coord.lockPrefix())
	octx, cancel = p.op(ctx)
	err = lock.TryLock(octx)
	cancel()
	if errors.Is(err, concurrency.ErrLocked) {
		return st, ErrCollectorBusy
	}
	if err != nil {
		return st, fmt.Errorf("collect: etcd lock: %w", err)
	}
	defer func() {
		uctx, cancel := p.op(context.WithoutCancel(ctx))
		lock.Unlock(uctx)
		cancel()
	}()

	// 0. Evict names over capacity, then rewrite the sparse packs (a
	// publish, before the fence).
	if opts.Capacity > 0 {
		if st.Evict, err = p.evict(ctx, opts.Capacity, opts.MinIdle, opts.DryRun); err != nil {
			return st, fmt.Errorf("collect: %w", err)
		}
	}
	if opts.Threshold > 0 {
		if st.Repack, err = p.repack(ctx, opts.Threshold, opts.Grace, opts.DryRun); err != nil {
			return st, fmt.Errorf("collect: %w", err)
		}
	}
	live := map[string]bool{}
	// 1. Mark from the names at revision R.
	if err := p.mark(ctx, live, &st); err != nil {
		return st, err
	}
	// A dry run deletes nothing, so it puts no fence and holds no
	// publish back: it reports what a collection would delete now.
	if !opts.DryRun {
		if err := p.fenceAndWait(ctx, sess); err != nil {
			return st, err
		}
		defer func() {
			dctx, cancel := p.op(context.WithoutCancel(ctx))
			p.coord.cli.Delete(dctx, p.coord.fenceKey())
			cancel()
		}()
	}
	// 4. Mark from the names now: those published since R.
	st.Names, st.DanglingNames = 0, 0
	if err := p.mark(ctx, live, &st); err != nil {
		return st, err
	}
	st.LiveObjects = len(live)
	return p.sweep(ctx, sess, live, opts, st)
}

// fenceAndWait puts the sweep fence (step 2) and waits for the publishes
// that began before it (step 3).
func (p *Pool) fenceAndWait(ctx context.Context, sess *concurrency.Session) error {
	// 2. The fence: no publish starts while it exists.
	octx, cancel := p.op(ctx)
	resp, err := p.coord.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(p.coord.fenceKey()), "=", 0)).
		Then(clientv3.OpPut(p.coord.fenceKey(), fmt.Sprintf("%x", int64(sess.Lease())), clientv3.WithLease(sess.Lease()))).
		Commit()
	cancel()
	if err != nil {
		return fmt.Errorf("collect: etcd: put the sweep fence: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("collect: a sweep fence is already up: %w", ErrCollectorBusy)
	}
	// 3. Wait for every publish that began before the fence to finish or
	// lose its lease (bounded by the longest lease TTL).
	wctx, cancel := context.WithTimeout(ctx, p.opTimeout+time.Duration(p.coord.ttl)*time.Second*3)
	err = p.coord.waitGone(wctx, p.coord.publishPrefix(), true)
	cancel()
	if err != nil {
		// The fence goes with this error: the caller has not deferred
		// its removal yet.
		dctx, dcancel := p.op(context.WithoutCancel(ctx))
		p.coord.cli.Delete(dctx, p.coord.fenceKey())
		dcancel()
		return fmt.Errorf("collect: wait for in-flight publishes: %w", err)
	}
	return nil
}

// sweep is step 5: it deletes the unmarked objects older than the grace
// period (in a dry run, counts them), while the collector's lease lives.
func (p *Pool) sweep(ctx context.Context, sess *concurrency.Session, live map[string]bool, opts CollectOptions, st CollectStats) (CollectStats, error) {
	// 5. Delete unmarked objects older than the grace period, while the
	// lease is alive.
	alive := leaseCheck(p, sess)
	now := time.Now()
	for _, dir := range []string{manifestDir, packDir} {
		var victims []ObjectInfo
		lctx, cancel := context.WithTimeout(ctx, 10*p.opTimeout)
		err := p.objs.List(lctx, dir, func(o ObjectInfo) error {
			// Only this pool's own objects: DIR/<sha256>. Anything else
			// under the prefix (another pool nested in this one, a
			// user's file) is never this collector's to delete.
			if rest, ok := strings.CutPrefix(o.Name, dir); !ok || !isHash(rest) {
				return nil
			}
			if live[o.Name] {
				return nil
			}
			if now.Sub(o.Modified) < opts.Grace {
				st.YoungKept++
				return nil
			}
			victims = append(victims, o)
			return nil
		})
		cancel()
		if err != nil {
			return st, fmt.Errorf("collect: %w", err)
		}
		// Deleted `deleters` at a time, so that the fence (which holds
		// every publish back) comes down sooner; each batch must be over
		// while the lease surely lives: a stalled DELETE landing after
		// the fence went could remove what a new publish just verified.
		for len(victims) > 0 {
			batch := victims[:min(deleters, len(victims))]
			victims = victims[len(batch):]
			if !opts.DryRun {
				deadline, err := alive(ctx)
				if err != nil {
					return st, err
				}
				if err := p.deleteAll(ctx, deadline, batch); err != nil {
					return st, fmt.Errorf("collect: %w", err)
				}
			}
			for _, o := range batch {
				st.Deleted++
				st.DeletedBytes += o.Size
				if opts.Progress != nil {
					opts.Progress(o.Name, o.Size)
				}
			}
		}
	}
	return st, nil
}

// deleters is how many objects a sweep deletes at once.
const deleters = 8

// deleteAll deletes the objects, all at once, each within deadline; the
// first error, once all are done.
func (p *Pool) deleteAll(ctx context.Context, deadline time.Time, objs []ObjectInfo) error {
	octx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	errs := make([]error, len(objs))
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = p.objs.Delete(octx, o.Name); errs[i] == nil && strings.HasPrefix(o.Name, packDir) {
				p.forgetPack(strings.TrimPrefix(o.Name, packDir))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// mark adds to live the manifests the names reach now and their packs.
func (p *Pool) mark(ctx context.Context, live map[string]bool, st *CollectStats) error {
	octx, cancel := p.op(ctx)
	names, _, err := p.coord.names(octx, "", 0)
	cancel()
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	st.Names = len(names)
	for path, name := range names {
		if live[manifestDir+name] {
			continue
		}
		m, err := p.settledManifest(ctx, name)
		if errors.Is(err, fs.ErrNotExist) || unreadable(err) {
			st.DanglingNames++
			p.log.Warn("pool: a name points to a missing or damaged manifest", "path", path, "manifest", name, "err", err)
			continue
		}
		if err != nil {
			// A manifest that cannot be read keeps everything: deleting
			// what it may reference is the one thing not to risk.
			return fmt.Errorf("collect: name %s: %w", path, err)
		}
		live[manifestDir+name] = true
		for _, c := range m.Chunks {
			live[packDir+c.Pack] = true
		}
	}
	return nil
}

// leaseCheck returns a check that fails once the collector's lease is
// gone or has less than half its TTL left, and otherwise returns when the
// next delete must be over: half the TTL left at the last check, counted
// from when that check was sent, and within OpTimeout. A collector must
// stop deleting well before a lease it lost lets a publish start (doc.go).
func leaseCheck(p *Pool, sess *concurrency.Session) func(context.Context) (time.Time, error) {
	var sent time.Time
	var left time.Duration
	ttl := time.Duration(p.coord.ttl) * time.Second
	return func(ctx context.Context) (time.Time, error) {
		select {
		case <-sess.Done():
			return time.Time{}, fmt.Errorf("collect: etcd lease lost; stopped deleting")
		default:
		}
		if time.Since(sent) >= min(500*time.Millisecond, ttl/4) {
			now := time.Now()
			octx, cancel := p.op(ctx)
			resp, err := p.coord.cli.TimeToLive(octx, sess.Lease())
			cancel()
			if err != nil {
				return time.Time{}, fmt.Errorf("collect: etcd lease check: %w; stopped deleting", err)
			}
			if resp.TTL*2 < int64(p.coord.ttl) {
				return time.Time{}, fmt.Errorf("collect: etcd lease has %d s left of %d; stopped deleting", resp.TTL, p.coord.ttl)
			}
			sent, left = now, time.Duration(resp.TTL)*time.Second
		}
		deadline := sent.Add(left / 2)
		if d := time.Now().Add(p.opTimeout); d.Before(deadline) {
			deadline = d
		}
		if !time.Now().Before(deadline) {
			return time.Time{}, fmt.Errorf("collect: no time left on the etcd lease to delete safely; stopped deleting")
		}
		return deadline, nil
	}
}
