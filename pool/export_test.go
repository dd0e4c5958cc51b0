package pool

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"
)

// RevokeLease ends this host's etcd session lease at once, as an expiry
// would: the tests inject lease expiry with it.
func (p *Pool) RevokeLease() {
	p.coord.mu.Lock()
	s := p.coord.sess
	p.coord.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.coord.cli.Revoke(ctx, s.Lease())
}

// BeforeEvict makes f run before each eviction's transaction, so that a
// test can change the name in between.
func (p *Pool) BeforeEvict(f func(path string)) { p.beforeEvict = f }

// ForgeSnap points path at a manifest whose chunks are path's but whose
// snapshot record is from's, as a host (or anyone with write access to
// the bucket) that lies would: a lookup must not trust it.
func (p *Pool) ForgeSnap(ctx context.Context, path, from string) error {
	return p.forge(ctx, path, from, func(forged, src *Manifest) { forged.Snap = src.Snap })
}

// ForgeLineage points path at a manifest whose chunks are path's but
// whose lineage record is from's: a publish that takes it as a parent
// must not store wrong bytes.
func (p *Pool) ForgeLineage(ctx context.Context, path, from string) error {
	return p.forge(ctx, path, from, func(forged, src *Manifest) { forged.Lineage = src.Lineage })
}

// RewriteAsVersion1 points path at a version 1 manifest of its chunks,
// as a kvfs before 2026-12-03 wrote: path must have been published with
// FixedChunks and no lineage.
func (p *Pool) RewriteAsVersion1(ctx context.Context, path string) error {
	return p.forge(ctx, path, path, func(forged, _ *Manifest) { forged.V, forged.ChunkSize, forged.Lineage = 1, p.chunkSize, nil })
}

// forge points path at a copy of its manifest changed by edit.
func (p *Pool) forge(ctx context.Context, path, from string, edit func(forged, src *Manifest)) error {
	names, _, err := p.coord.names(ctx, "", 0)
	if err != nil {
		return err
	}
	m, err := p.manifest(ctx, names[path])
	if err != nil {
		return err
	}
	src, err := p.manifest(ctx, names[from])
	if err != nil {
		return err
	}
	forged := *m
	edit(&forged, src)
	name, b, err := forged.Encode()
	if err != nil {
		return err
	}
	if err := p.objs.Put(ctx, manifestDir+name, bytes.NewReader(b), int64(len(b))); err != nil {
		return err
	}
	sess, err := p.coord.session(ctx)
	if err != nil {
		return err
	}
	key, err := p.coord.beginPublish(ctx, sess, p.opTimeout)
	if err != nil {
		return err
	}
	defer p.coord.cli.Delete(ctx, key)
	return p.coord.commitName(ctx, key, path, name, nil)
}

// SnapOf is the snapshot record of path's manifest, and the manifest's
// name.
func (p *Pool) SnapOf(ctx context.Context, path string) (*SnapInfo, string, error) {
	names, _, err := p.coord.names(ctx, "", 0)
	if err != nil {
		return nil, "", err
	}
	m, err := p.manifest(ctx, names[path])
	if err != nil {
		return nil, "", err
	}
	return m.Snap, names[path], nil
}

// PutRawName sets a name's etcd value as anyone with access to etcd
// could, bypassing every check.
func (p *Pool) PutRawName(ctx context.Context, path, value string) error {
	_, err := p.coord.cli.Put(ctx, p.coord.namesKey(path), value)
	return err
}

// SetMaxChunks lowers the chunks a manifest may hold, so that a test
// reaches the bound with small files.
func (p *Pool) SetMaxChunks(n int) { p.maxChunks = n }

// ManifestChunks is the number of chunks of path's manifest.
func (p *Pool) ManifestChunks(ctx context.Context, path string) (int, error) {
	names, _, err := p.coord.names(ctx, "", 0)
	if err != nil {
		return 0, err
	}
	m, err := p.manifest(ctx, names[path])
	if err != nil {
		return 0, err
	}
	return len(m.Chunks), nil
}

// countingObjects counts an Objects' ranged reads.
type countingObjects struct {
	Objects
	reads *atomic.Int64
}

func (c countingObjects) ReadRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	c.reads.Add(1)
	return c.Objects.ReadRange(ctx, name, off, n)
}

// CountReads makes p count its ranged reads of objects.
func (p *Pool) CountReads() *atomic.Int64 {
	n := new(atomic.Int64)
	p.objs = countingObjects{p.objs, n}
	return n
}
