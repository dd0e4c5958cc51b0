package pool

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A pool file's owner and permission bits, as the mount that published it
// recorded them (the creator, and its mode after its umask; changed by
// chmod and chown through a mount), are kept in etcd beside the name:
// attrs/<path> → "UID GID MODE" (decimal, decimal, octal). They move with
// a rename and go with a removal or an eviction, in the same transaction
// as the name; a file published again without an owner (written again
// through a mount, or by kvfs pool put) keeps them. A file published
// without them (kvfs pool put of a new name, or a kvfs before
// 2026-12-03) shows as the mount's daemon's, 0644, as every file did
// before. They are what a mount shows the kernel, which checks them
// (default_permissions): they are as trustworthy as etcd's access control
// (doc.go, "Other users").

// Owner is a file's owner, group and permission bits.
type Owner struct {
	Uid, Gid uint32
	Mode     uint32 // permission bits only (07777)
}

func (c *coord) attrsKey(path string) string { return c.pfx + "attrs/" + path }

// encode is an Owner's etcd value.
func (o Owner) encode() string {
	return fmt.Sprintf("%d %d %o", o.Uid, o.Gid, o.Mode&0o7777)
}

// decodeOwner parses an attrs value; nil for one that is not an Owner
// (anyone with access to etcd can write any value): the file then shows
// as one published without an owner.
func decodeOwner(v string) *Owner {
	f := strings.Fields(v)
	if len(f) != 3 {
		return nil
	}
	uid, err1 := strconv.ParseUint(f[0], 10, 32)
	gid, err2 := strconv.ParseUint(f[1], 10, 32)
	mode, err3 := strconv.ParseUint(f[2], 8, 32)
	if err1 != nil || err2 != nil || err3 != nil || mode&^0o7777 != 0 {
		return nil
	}
	return &Owner{Uid: uint32(uid), Gid: uint32(gid), Mode: uint32(mode)}
}

// ownerOps are the operations that set path's owner to o within a
// name's transaction; none for o nil: a file published again keeps the
// owner and mode it has, as a file written again does on a disk (a
// chmod on another host is not undone by a writer's stale view of it).
func (c *coord) ownerOps(path string, o *Owner) []clientv3.Op {
	if o == nil {
		return nil
	}
	return []clientv3.Op{clientv3.OpPut(c.attrsKey(path), o.encode())}
}

// ResolveOwned is Resolve with the file's owner (nil: none recorded),
// read with the name in one etcd round trip.
func (p *Pool) ResolveOwned(ctx context.Context, path string) (manifest string, size int64, o *Owner, err error) {
	if err := checkPath(path); err != nil {
		return "", 0, nil, err
	}
	octx, cancel := p.op(ctx)
	resp, err := p.coord.cli.Txn(octx).Then(clientv3.OpGet(p.coord.namesKey(path)), clientv3.OpGet(p.coord.attrsKey(path))).Commit()
	cancel()
	if err != nil {
		return "", 0, nil, fmt.Errorf("stat %s: %w", path, p.etcd.named(p.explain(ctx, err)))
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", 0, nil, fmt.Errorf("stat %s: %w", path, fs.ErrNotExist)
	}
	if a := resp.Responses[1].GetResponseRange().Kvs; len(a) > 0 {
		o = decodeOwner(string(a[0].Value))
	}
	name := string(kvs[0].Value)
	m, err := p.manifest(ctx, name)
	if err != nil {
		return "", 0, nil, fmt.Errorf("stat %s: %w", path, p.explain(ctx, err))
	}
	p.learn(name, m)
	return name, m.Size, o, nil
}

// SetOwner records path's owner and mode (chmod, chown through a mount),
// if path is a name; fs.ErrNotExist otherwise.
func (p *Pool) SetOwner(ctx context.Context, path string, o Owner) error {
	if err := checkPath(path); err != nil {
		return err
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	resp, err := p.coord.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(p.coord.namesKey(path)), ">", 0)).
		Then(clientv3.OpPut(p.coord.attrsKey(path), o.encode())).
		Commit()
	if err != nil {
		return fmt.Errorf("chmod %s: etcd: %w", path, p.explain(ctx, err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("chmod %s: %w", path, fs.ErrNotExist)
	}
	return nil
}

// Owners returns the owners recorded for the names under prefix (a
// directory's "dir/", or "" for all), by path: one etcd round trip. A
// name without one is absent (it is the daemon's, 0644, to a mount).
func (p *Pool) Owners(ctx context.Context, prefix string) (map[string]*Owner, error) {
	octx, cancel := p.op(ctx)
	resp, err := p.coord.cli.Get(octx, p.coord.attrsKey(prefix), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("owners of %s: etcd: %w", prefix, p.explain(ctx, err))
	}
	out := make(map[string]*Owner, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if o := decodeOwner(string(kv.Value)); o != nil {
			out[string(kv.Key[len(p.coord.attrsKey("")):])] = o
		}
	}
	return out, nil
}

// A directory's owner and mode, set by a mkdir through a mount, are kept
// under attrs/<dir>/ (a name never ends in /): directories are the
// prefixes of names, but an engine makes its blocks directory 0700, and a
// directory shown 0755 to every user of an allow_other mount would expose
// what its maker hid. The record outlives the directory's last name, and
// a later directory of that name shows it; a rmdir through a mount
// removes it.

// SetDirOwner records the owner and mode of directory dir.
func (p *Pool) SetDirOwner(ctx context.Context, dir string, o Owner) error {
	if err := checkPath(dir); err != nil {
		return err
	}
	octx, cancel := p.op(ctx)
	defer cancel()
	if _, err := p.coord.cli.Put(octx, p.coord.attrsKey(dir+"/"), o.encode()); err != nil {
		return fmt.Errorf("mkdir %s: etcd: %w", dir, p.explain(ctx, err))
	}
	return nil
}

// DirOwner returns directory dir's recorded owner and mode (nil: none).
func (p *Pool) DirOwner(ctx context.Context, dir string) (*Owner, error) {
	octx, cancel := p.op(ctx)
	defer cancel()
	resp, err := p.coord.cli.Get(octx, p.coord.attrsKey(dir+"/"))
	if err != nil {
		return nil, fmt.Errorf("stat %s: etcd: %w", dir, p.explain(ctx, err))
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return decodeOwner(string(resp.Kvs[0].Value)), nil
}

// RemoveDirOwner removes directory dir's record (a rmdir).
func (p *Pool) RemoveDirOwner(ctx context.Context, dir string) error {
	octx, cancel := p.op(ctx)
	defer cancel()
	if _, err := p.coord.cli.Delete(octx, p.coord.attrsKey(dir+"/")); err != nil {
		return fmt.Errorf("rmdir %s: etcd: %w", dir, p.explain(ctx, err))
	}
	return nil
}
