package pool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrEtcdDown is the error of a read of names made while etcd is known
// to be unreachable: the call is not made, so that a caller with another
// source (a mount's last listing and versions) turns to it at once
// instead of after OpTimeout.
var ErrEtcdDown = errors.New("etcd is unreachable")

// reach tracks whether etcd answers reads of names. A read that fails
// marks it down; one prober then asks etcd every second until it
// answers. While it is down, reads of names fail at once (ErrEtcdDown)
// and uses are not recorded, so that a pool mount keeps serving what it
// has cached at the speed of its cache, not one OpTimeout per lookup.
// Publishes and removals still try etcd (and fail after OpTimeout):
// they must not report success without it.
type reach struct {
	down, probing atomic.Bool
	since         atomic.Int64 // unix nanoseconds of the failure that marked it down
	closed        atomic.Bool
}

// etcdDown reports whether etcd is known to be unreachable now.
func (p *Pool) etcdDown() bool { return p.reach.down.Load() }

// readFailed notes a failed read of etcd (err != nil) that was not the
// caller's own cancellation.
func (p *Pool) readFailed(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil || p.reach.closed.Load() {
		return
	}
	if !p.reach.down.Swap(true) {
		p.reach.since.Store(time.Now().UnixNano())
		p.log.Warn("pool: etcd does not answer; serving names from what this host knows until it does", "err", err)
	}
	if !p.reach.probing.Swap(true) {
		go p.probe()
	}
}

// probe asks etcd every second until it answers, then marks it up.
func (p *Pool) probe() {
	for !p.reach.closed.Load() {
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), min(p.opTimeout, 2*time.Second))
		_, err := p.coord.cli.Get(ctx, p.coord.fenceKey())
		cancel()
		if err == nil {
			// Not probing before up: a failure in between starts a
			// prober of its own, rather than marking etcd down with
			// none left to find it back.
			p.reach.probing.Store(false)
			p.reach.down.Store(false)
			p.log.Warn("pool: etcd answers again", "after", time.Since(time.Unix(0, p.reach.since.Load())).Round(time.Second))
			return
		}
	}
	p.reach.probing.Store(false)
}

// downErr is the error of a read not made because etcd is down.
func (p *Pool) downErr(op, path string) error {
	return fmt.Errorf("%s %s: %w (for %v; this host asks again every second)", op, path, ErrEtcdDown,
		time.Since(time.Unix(0, p.reach.since.Load())).Round(time.Second))
}
