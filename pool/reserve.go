package pool

import (
	"context"
	"fmt"
	"io/fs"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func (c *coord) creatingKey(path string) string { return c.pfx + "creating/" + path }

// Reserve claims path for a file created exclusively (O_EXCL) by this
// host and not published yet. It fails with fs.ErrExist if the name
// exists in the pool or another host holds a claim on it, in one etcd
// transaction, so that of two hosts creating one name exclusively at
// once exactly one succeeds, as on a disk. The claim is a key bound to
// this host's session lease: a host that dies gives it up with its lease.
// Publishes and renames do not look at claims (O_EXCL excludes existing
// names and other exclusive creates, not later replacements).
func (p *Pool) Reserve(ctx context.Context, path string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	sess, err := p.coord.session(octx)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, p.etcd.named(p.explain(ctx, err)))
	}
	key := p.coord.creatingKey(path)
	resp, err := p.coord.cli.Txn(octx).
		If(append(p.coord.noConflict(path), clientv3.Compare(clientv3.CreateRevision(p.coord.namesKey(path)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0))...).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(sess.Lease()))).
		Commit()
	if err != nil {
		return fmt.Errorf("create %s: %w", path, p.etcd.named(p.explain(ctx, err)))
	}
	if !resp.Succeeded {
		return fmt.Errorf("create %s: %w", path, fs.ErrExist)
	}
	return nil
}

// Unreserve gives up a claim of Reserve: the file was published (its
// name now excludes other exclusive creates), renamed, removed or closed.
// A failure is logged; the claim then goes with this host's lease.
func (p *Pool) Unreserve(ctx context.Context, path string) {
	octx, cancel := p.op(ctx)
	defer cancel()
	if _, err := p.coord.cli.Delete(octx, p.coord.creatingKey(path)); err != nil {
		p.log.Warn("pool: claim of a new name not given up; it goes with this host's lease", "path", path, "err", err)
	}
}
