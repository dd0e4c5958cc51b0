package pool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TakeOver makes this host the successor of the one that last recorded
// its etcd lease in file (a pool mount's spool directory holds one):
// the lease recorded there is revoked now, and this host records its own
// lease there from now on (each one, as sessions are replaced).
//
// A host killed (SIGKILL, a crash) leaves its lease to expire, which takes
// the lease's TTL: until then its claims on names it was creating
// exclusively (Reserve) refuse an O_EXCL create of those names with
// EEXIST, on every host, though no such name is listed, and its publish
// keys hold back the collection of what it uploaded. Revoked, they go at
// once, and the restarted daemon's engine can write the file again.
//
// The caller must know that the host that wrote file is dead (poolfs
// holds the spool directory's lock for its daemon's life): revoking a
// live host's lease fails its publishes. A record of another pool, or of
// another etcd cluster, is left alone.
func (p *Pool) TakeOver(ctx context.Context, file string) error {
	c := p.coord
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	resp, err := c.cli.Get(octx, c.fenceKey())
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	cluster := resp.Header.GetClusterId()
	// pfx, cluster id, lease id, one a line.
	if f := strings.Split(strings.TrimSpace(string(b)), "\n"); len(f) == 3 && f[0] == c.pfx && f[1] == fmt.Sprintf("%x", cluster) {
		lease, err := strconv.ParseInt(f[2], 16, 64)
		if err != nil {
			return fmt.Errorf("%s: not a lease record", file)
		}
		if _, err := c.cli.Revoke(octx, clientv3.LeaseID(lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcd: revoke the lease %x of this host's predecessor: %w", lease, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaseFile = file
	if c.sess != nil {
		return c.recordLease(cluster, c.sess.Lease())
	}
	return nil
}

// recordLease writes the lease of a new session to the lease file, if
// TakeOver named one (under c.mu).
func (c *coord) recordLease(cluster uint64, lease clientv3.LeaseID) error {
	if c.leaseFile == "" {
		return nil
	}
	tmp := c.leaseFile + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%s\n%x\n%x\n", c.pfx, cluster, int64(lease)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.leaseFile)
}
