package pool

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config says how a host joins a pool.
type Config struct {
	S3 S3Config
	// Etcd lists etcd's client endpoints (HOST:PORT).
	Etcd []string
	// CacheDir holds this host's local chunk cache; CacheBytes bounds it
	// (0: 1 GiB). An empty CacheDir keeps no cache.
	CacheDir   string
	CacheBytes int64
	// VerifyCache hashes a cached chunk on every read, not only the
	// first time this process reads it: a cache file damaged while the
	// daemon runs (by the disk, or another root process) is then a miss,
	// never wrong bytes (kvfs mount --verify).
	VerifyCache bool
	// ChunkSize is the longest chunk files are cut into (0: 1 MiB):
	// rows every ChunkSize bytes after their parent's chunks, bytes of
	// no parsed format by content into chunks of ChunkSize/8 to
	// ChunkSize (store.Cut).
	ChunkSize int64
	// FixedChunks cuts bytes of no parsed format every ChunkSize bytes
	// instead of by content, as a store with chunking=fixed does (tests
	// that count chunks use it).
	FixedChunks bool
	// PackBytes is the size at which a publish closes a pack object (0:
	// 32 MiB).
	PackBytes int64
	// LeaseTTL is the etcd session's TTL (0: 10 s): how long a host that
	// stopped keeps its publishes from being collected.
	LeaseTTL time.Duration
	// OpTimeout bounds each call to S3 or etcd (0: 30 s), so that a
	// service that does not answer turns into an error, not a hang; after
	// one such call, calls to that service fail at once until it answers
	// again (breaker.go).
	OpTimeout time.Duration
	Logger    *slog.Logger
}

// Pool is one host's handle on a shared pool. Its methods are safe for
// concurrent use.
type Pool struct {
	objs      Objects
	coord     *coord
	cache     *Cache
	chunkSize int64
	fixed     bool
	maxChunks int // a manifest's chunks at most (maxPublishChunks; tests lower it)
	packBytes int64
	opTimeout time.Duration
	log       *slog.Logger

	mu        sync.Mutex
	known     map[[32]byte]loc        // chunks this host believes are in the pool
	manifests map[string]*Manifest    // manifests read, by hash (immutable): a cache
	seen      map[string]bool         // manifests learned (publish.go, learn)
	know      *knowledge              // the local index of them, with a cache directory
	touched   map[string]time.Time    // when this host last recorded a use of each name (evict.go)
	snaps     map[string]*SnapInfo    // records made late, by manifest (match.go)
	lineages  map[string]*LineageInfo // lineage records learned, by manifest (parent.go)
	// lineageKeys counts the chain keys lineages holds, bounded by
	// maxLineageKeys (32 bytes each).
	lineageKeys int
	// snapOf are the snapshot records of the manifests learned (nil: the
	// manifest has none), by manifest; snapKeys counts their chain keys.
	snapOf   map[string]*SnapInfo
	snapKeys int
	// manifestBytes estimates the memory manifests holds.
	manifestBytes int64
	// beforeEvict, set by tests, runs before each eviction's transaction.
	beforeEvict func(path string)
	badNames    int // names left out of the last listing (List), logged when it changes

	// s3 and etcd are the services' circuit breakers: every call to S3
	// (objs) and to etcd's key-value API (coord.cli.KV) goes through them.
	s3, etcd *breaker
	closed   atomic.Bool
}

// loc is where a chunk lies.
type loc struct {
	pack     string
	off, len int64
	// checked: this process read the chunk's bytes at this place and
	// they matched its sha256, or uploaded them there. A place learned
	// from a manifest alone is a claim of whoever wrote it, which a
	// publish checks before reusing it (publishing.reuse).
	checked bool
}

// Open joins the pool that cfg describes.
func Open(ctx context.Context, cfg Config) (*Pool, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = 1 << 20
	}
	if cfg.ChunkSize < minChunkSize || cfg.ChunkSize > maxChunkSize {
		return nil, fmt.Errorf("pool: chunk size %d: want %d to %d", cfg.ChunkSize, minChunkSize, maxChunkSize)
	}
	if cfg.PackBytes == 0 {
		cfg.PackBytes = 32 << 20
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 30 * time.Second
	}
	if len(cfg.Etcd) == 0 {
		return nil, fmt.Errorf("pool %s: no etcd endpoints (--etcd HOST:PORT)", cfg.S3.Pool)
	}
	octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	defer cancel()
	s3, err := OpenS3(octx, cfg.S3)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", cfg.S3.Pool, err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Etcd,
		DialTimeout: cfg.OpTimeout,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("pool %s: etcd %v: %w", cfg.S3.Pool, cfg.Etcd, err)
	}
	// One call that must answer, so that a wrong endpoint fails here.
	if _, err := cli.Get(octx, "kvfs-ping"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("pool %s: etcd %v does not answer: %w", cfg.S3.Pool, cfg.Etcd, err)
	}
	bucket, prefix, _ := ParsePool(cfg.S3.Pool)
	co := &coord{cli: cli, pfx: "kvfs/" + bucket + "/" + prefix + "#/", ttl: max(1, int(cfg.LeaseTTL/time.Second)), log: cfg.Logger}
	s3b := newBreaker("S3", cfg.S3.Endpoint, ErrS3Down, cfg.OpTimeout, s3.Ping, cfg.Logger)
	kv := cli.KV
	co.etcd = newBreaker("etcd", strings.Join(cfg.Etcd, ","), ErrEtcdDown, cfg.OpTimeout, func(ctx context.Context) error {
		_, err := kv.Get(ctx, co.fenceKey())
		return err
	}, cfg.Logger)
	cli.KV = guardedKV{KV: kv, b: co.etcd}
	p := &Pool{
		objs:      guardedObjects{objs: s3, b: s3b},
		coord:     co,
		s3:        s3b,
		etcd:      co.etcd,
		chunkSize: cfg.ChunkSize,
		fixed:     cfg.FixedChunks,
		maxChunks: maxPublishChunks,
		packBytes: cfg.PackBytes,
		opTimeout: cfg.OpTimeout,
		log:       cfg.Logger,
		known:     map[[32]byte]loc{},
		manifests: map[string]*Manifest{},
		seen:      map[string]bool{},
		lineages:  map[string]*LineageInfo{},
		snapOf:    map[string]*SnapInfo{},
		touched:   map[string]time.Time{},
		snaps:     map[string]*SnapInfo{},
	}
	if cfg.CacheDir != "" {
		if cfg.CacheBytes == 0 {
			cfg.CacheBytes = 1 << 30
		}
		if p.cache, err = OpenCache(cfg.CacheDir, cfg.CacheBytes); err != nil {
			cli.Close()
			return nil, err
		}
		p.cache.verifyAlways = cfg.VerifyCache
		if p.know, err = openKnowledge(cfg.CacheDir); err != nil {
			cli.Close()
			return nil, err
		}
		if err := p.know.load(func(name string, m *Manifest) { p.remember(name, m) }); err != nil {
			p.log.Warn("pool: local index not read", "err", err)
		}
	}
	return p, nil
}

// Close gives up this host's etcd session (its in-flight publishes end
// with it) and closes the clients.
func (p *Pool) Close() error {
	p.closed.Store(true)
	p.s3.close()
	p.etcd.close()
	p.coord.close()
	if p.cache != nil {
		p.cache.Close()
	}
	err := p.coord.cli.Close()
	if p.know != nil {
		if kerr := p.know.close(); err == nil {
			err = kerr
		}
	}
	return err
}

// op is a context for one call to a service, bounded by OpTimeout (whose
// end, as the context's cause, tells the breaker that the service did
// not answer).
func (p *Pool) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, p.opTimeout, errNoAnswer)
}

// Stats are a host's figures for the pool.
type Stats struct {
	KnownChunks int
	Cache       CacheStats
}

// Stats reports this host's pool and cache figures.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	st := Stats{KnownChunks: len(p.known)}
	p.mu.Unlock()
	if p.cache != nil {
		st.Cache = p.cache.Stats()
	}
	return st
}
