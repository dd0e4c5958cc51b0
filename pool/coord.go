package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// coord is the pool's state in etcd, under one key prefix per pool,
// PFX = kvfs/BUCKET/PREFIX#/ ('#' cannot occur in PREFIX, so that no
// pool's keys lie under another's):
//
//	PFX/names/<path>          → the file's manifest hash: the only roots
//	PFX/used/<path>           → when the file was last published or opened (Unix seconds; evict.go)
//	PFX/publish/<lease>/<id>  → an in-flight publish, bound to its lease
//	PFX/fence                 → a sweep in progress, bound to the collector's lease
//	PFX/collector/...         → the collectors' lock (one collects at a time)
type coord struct {
	cli  *clientv3.Client // its KV goes through etcd (guardedKV)
	etcd *breaker
	pfx  string
	ttl  int // seconds

	mu        sync.Mutex
	sess      *concurrency.Session
	leaseFile string // where each new session's lease is recorded (TakeOver)
	log       *slog.Logger
}

func (c *coord) namesKey(path string) string { return c.pfx + "names/" + path }
func (c *coord) namesPrefix() string         { return c.pfx + "names/" }
func (c *coord) usedKey(path string) string  { return c.pfx + "used/" + path }
func (c *coord) usedPrefix() string          { return c.pfx + "used/" }
func (c *coord) publishPrefix() string       { return c.pfx + "publish/" }
func (c *coord) fenceKey() string            { return c.pfx + "fence" }
func (c *coord) lockPrefix() string          { return c.pfx + "collector" }

// session is this host's live etcd session: a lease kept alive in the
// background. One whose lease expired (etcd unreachable for longer than
// its TTL, or revoked) is replaced by a new one, so that a host recovers
// without a restart once etcd is back.
func (c *coord) session(ctx context.Context) (*concurrency.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil {
		select {
		case <-c.sess.Done():
			c.sess = nil
		default:
			return c.sess, nil
		}
	}
	s, cluster, err := c.grantSession(ctx, context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	if err := c.recordLease(cluster, s.Lease()); err != nil {
		// Not fatal: a successor then waits out the lease's TTL.
		c.log.Warn("pool: this host's etcd lease not recorded", "file", c.leaseFile, "err", err)
	}
	c.sess = s
	return s, nil
}

// newSession grants a lease within ctx (bounded: etcd may not answer) and
// keeps it alive until life ends or the session is closed.
func (c *coord) newSession(ctx, life context.Context) (*concurrency.Session, error) {
	s, _, err := c.grantSession(ctx, life)
	return s, err
}

// grantSession is newSession, and the id of etcd's cluster.
func (c *coord) grantSession(ctx, life context.Context) (*concurrency.Session, uint64, error) {
	var lease *clientv3.LeaseGrantResponse
	err := c.etcd.do(ctx, "grant a lease", func(ctx context.Context) (err error) {
		lease, err = c.cli.Grant(ctx, int64(c.ttl))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: grant a lease: %w", err)
	}
	s, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(c.ttl), concurrency.WithContext(life))
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: session: %w", err)
	}
	return s, lease.ResponseHeader.GetClusterId(), nil
}

// dropSession forgets s (its lease is gone or being given up).
func (c *coord) dropSession(s *concurrency.Session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
}

func (c *coord) close() {
	c.mu.Lock()
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Orphan()
		c.cli.Revoke(ctx, s.Lease())
	}
}

// ErrLeaseLost is a publish whose key vanished (its etcd lease expired
// or was revoked) before its name was set: it published nothing.
var ErrLeaseLost = errors.New("etcd lease expired during the publish")

// fenceWait bounds how long a publish waits for a collection's fence.
const fenceWait = 10 * time.Minute

// beginPublish creates a publish key bound to the session's lease, once
// no sweep fence exists (waiting for the fence to go).
//
// Each call to etcd is bounded by opTimeout; the wait for a fence by
// fenceWait (a collection fences publishes while it sweeps, which can take
// far longer than one call).
func (c *coord) beginPublish(ctx context.Context, s *concurrency.Session, opTimeout time.Duration) (string, error) {
	key := fmt.Sprintf("%s%x/%s", c.publishPrefix(), int64(s.Lease()), randomID())
	for {
		octx, cancel := context.WithTimeoutCause(ctx, opTimeout, errNoAnswer)
		resp, err := c.cli.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(c.fenceKey()), "=", 0)).
			Then(clientv3.OpPut(key, "", clientv3.WithLease(s.Lease()))).
			Commit()
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			c.dropSession(s)
			return "", ErrLeaseLost
		}
		if err != nil {
			return "", fmt.Errorf("etcd: begin publish: %w", err)
		}
		if resp.Succeeded {
			return key, nil
		}
		// A sweep is fenced: wait for the fence to go. It goes when the
		// sweep ends, or with the collector's lease.
		wctx, cancel := context.WithTimeout(ctx, fenceWait)
		err = c.waitGone(wctx, c.fenceKey(), false)
		cancel()
		if err != nil {
			return "", fmt.Errorf("etcd: wait for the sweep fence (a collection is running): %w", err)
		}
	}
}

// commitName sets the name to the manifest, if the publish key still
// exists; ErrLeaseLost if not.
func (c *coord) commitName(ctx context.Context, pubKey, path, manifest string, o *Owner) error {
	resp, err := c.cli.Txn(ctx).
		If(append(c.noConflict(path), clientv3.Compare(clientv3.CreateRevision(pubKey), ">", 0))...).
		Then(append([]clientv3.Op{clientv3.OpPut(c.namesKey(path), manifest), clientv3.OpPut(c.usedKey(path), usedNow())}, c.ownerOps(path, o)...)...).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: set name %s: %w", path, err)
	}
	if !resp.Succeeded {
		return c.whyNot(ctx, pubKey, path)
	}
	return nil
}

// ErrNameConflict is a name that would be a file and a directory at once:
// a file's path is another file's directory, or the other way round.
var ErrNameConflict = errors.New("a file and a directory of one name")

// noConflict are the comparisons that keep path from being a file and a
// directory at once: no name under path/, and none at any of path's
// parents. Two mounts (or kvfs pool put) could otherwise make "d" and
// "d/f" in the same second, and "d/f" could no longer be reached.
func (c *coord) noConflict(path string) []clientv3.Cmp {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.namesKey(path+"/")), "=", 0).WithPrefix()}
	for d := path; ; {
		i := strings.LastIndexByte(d, '/')
		if i < 0 {
			break
		}
		d = d[:i]
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.namesKey(d)), "=", 0))
	}
	return cmps
}

// whyNot tells why a transaction that required pubKey and noConflict(path)
// failed.
func (c *coord) whyNot(ctx context.Context, pubKey, path string) error {
	resp, err := c.cli.Get(ctx, pubKey, clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("etcd: set name %s: %w", path, err)
	}
	if resp.Count == 0 {
		return ErrLeaseLost
	}
	return fmt.Errorf("set name %s: %w", path, ErrNameConflict)
}

// waitGone waits until no key exists at key (with prefix: under it).
func (c *coord) waitGone(ctx context.Context, key string, prefix bool) error {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	for {
		resp, err := c.cli.Get(ctx, key, append(opts, clientv3.WithCountOnly())...)
		if err != nil {
			return err
		}
		if resp.Count == 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		wch := c.cli.Watch(wctx, key, append(opts, clientv3.WithRev(resp.Header.Revision+1))...)
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			gone := false
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					gone = true
				}
			}
			if gone {
				break
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// names lists the names under prefix with their manifests, at rev (0:
// now), and the revision read.
func (c *coord) names(ctx context.Context, prefix string, rev int64) (map[string]string, int64, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := c.cli.Get(ctx, c.namesPrefix()+prefix, opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: list names: %w", err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key[len(c.namesPrefix()):])] = string(kv.Value)
	}
	return out, resp.Header.Revision, nil
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
