package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
)

func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gc", "[--dry-run] [--threshold F] STORE", `Compact a store: rewrite each pack whose dead fraction (bytes of released
chunks over the pack's length) is at least the threshold, copying its live
chunks into new packs, and remove packs with nothing live. This reclaims the
space of removed files where the filesystem cannot punch holes (macOS APFS,
some network filesystems) and keeps packs from becoming sparse. Files read
the same throughout, including files open while it runs.

When the store is mounted, the daemon does the work (through its control
socket, STORE/kvfs.sock); otherwise kvfs gc opens the store itself, and
first applies the store's capacity (kvfs config) as a daemon does: files
are evicted, in the retention policy's order, until stored bytes are under
the low-water mark, and the count and bytes evicted are printed. A mounted
daemon also compacts in the background (kvfs mount --compact-interval).
Prints the packs rewritten and removed, the bytes copied and the disk space
reclaimed (allocated blocks of the pack files, before and after).

With --pool (and no STORE), collect a pool that several hosts share
instead (pool/doc.go): delete the pack and manifest objects no name reaches
that are older than --grace, never one an in-flight publish needs. Before
that, it rewrites the packs older than --grace whose dead fraction is at
least --threshold: their live chunks are copied into new packs and the names
that used them move to the copies (a name changed meanwhile keeps its new
state), so that the old packs go in the same collection. With --capacity,
before either, it removes names, least recently used first, until the
distinct chunks the names reach fit in SIZE, never a name used within
--min-idle, and never one published or opened while it decides. One host
collects at a time; another that tries meanwhile is refused.`)
	dry := fs.Bool("dry-run", false, "report what would be rewritten, removed and reclaimed, and change nothing")
	threshold := fs.Float64("threshold", store.DefaultCompactThreshold, "rewrite packs whose dead fraction is at least this (0 < F <= 1); packs with nothing live are removed whatever it is")
	var pf poolFlags
	pf.add(fs)
	grace := fs.Duration("grace", time.Hour, "with --pool: delete only unreached objects older than this")
	capacity := fs.String("capacity", "", "with --pool: first remove names, least recently used (published or opened, by any host) first, until what the names reach takes at most SIZE (K, M, G, T suffixes)")
	minIdle := fs.Duration("min-idle", time.Hour, "with --pool and --capacity: never remove a name used (opened, published, or looked up through a pool mount) within this; keep it above the engine's longest snapshot write plus a minute, since an engine that found a name lists it in the manifest it publishes last")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.Changed("pool") {
		if fs.NArg() != 0 {
			return usagef("with --pool, no STORE")
		}
		if *grace <= 0 {
			return usagef("--grace: want a positive duration")
		}
		if *threshold <= 0 || *threshold > 1 {
			return usagef("--threshold: want a fraction in (0, 1], not %v", *threshold)
		}
		opts := pool.CollectOptions{Grace: *grace, DryRun: *dry, Threshold: *threshold, MinIdle: *minIdle}
		if *capacity != "" {
			n, err := store.ParseSize(*capacity)
			if err != nil || n <= 0 {
				return usagef("--capacity %q: want a positive size such as 500G", *capacity)
			}
			opts.Capacity = n
		}
		if *minIdle < 0 {
			return usagef("--min-idle: want a duration of 0 or more")
		}
		return runPoolGC(ctx, &pf, opts, stdout, stderr)
	}
	for _, name := range []string{"grace", "capacity", "min-idle"} {
		if fs.Changed(name) {
			return usagef("--%s is for a pool (--pool); a store's capacity is kvfs mount --capacity", name)
		}
	}
	if fs.NArg() != 1 {
		return usagef("want STORE")
	}
	if *threshold <= 0 || *threshold > 1 {
		return usagef("--threshold: want a fraction in (0, 1], not %v", *threshold)
	}
	dir := fs.Arg(0)
	opts := store.CompactOptions{Threshold: *threshold, DryRun: *dry}
	res, err := compactMounted(dir, opts)
	if err == errNotMounted {
		if err := notAStore(dir); err != nil {
			return err
		}
		bar := newProgress(stderr, "copy", 64<<20, 1<<62)
		opts.Progress = bar.update
		gopts := gc.CompactOptions{CompactOptions: opts}
		if !*dry {
			// Unmounted, the store's capacity is applied here first (a
			// daemon applies it after each commit).
			gopts.Before = func(s *store.Store) error { return evictToCapacity(s, nil, stdout, stderr) }
		}
		res, err = gc.Compact(ctx, dir, gopts)
		err = inUseBy(dir, err)
		bar.done()
	}
	if err != nil {
		return err
	}
	gc.PrintCompact(stdout, dir, res, *dry)
	return nil
}

// errNotMounted: no daemon answers on the store's socket.
var errNotMounted = fmt.Errorf("not mounted")

// compactMounted asks the daemon holding dir, if one answers, to compact.
func compactMounted(dir string, opts store.CompactOptions) (*store.CompactResult, error) {
	real, err := store.TrustedDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", dir, err)
	}
	sock := filepath.Join(real, socketName)
	if _, err := os.Stat(sock); err != nil {
		return nil, errNotMounted
	}
	c := newSocketClient(sock, defaultSocketTimeouts())
	defer c.Close()
	if err := c.ping(); err != nil {
		if isTimeout(err) {
			return nil, err
		}
		return nil, errNotMounted
	}
	return c.Compact(opts)
}

// Compact asks the daemon to compact its store (POST /v1/gc).
func (c *socketClient) Compact(opts store.CompactOptions) (*store.CompactResult, error) {
	q := url.Values{"threshold": {strconv.FormatFloat(opts.Threshold, 'g', -1, 64)}}
	if opts.DryRun {
		q.Set("dry_run", "1")
	}
	var res store.CompactResult
	if _, err := c.do("POST", "/v1/gc", q, nil, &res); err != nil {
		return nil, fmt.Errorf("gc through %s: %w", c.sock, err)
	}
	return &res, nil
}

// compactRequest serves POST /v1/gc: a compaction by the daemon.
func compactRequest(s *store.Store) func(r *http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		var opts store.CompactOptions
		if t := r.URL.Query().Get("threshold"); t != "" {
			f, err := strconv.ParseFloat(t, 64)
			if err != nil || f <= 0 || f > 1 {
				return nil, fmt.Errorf("gc: bad threshold %q", t)
			}
			opts.Threshold = f
		}
		opts.DryRun = r.URL.Query().Get("dry_run") == "1"
		return s.Compact(r.Context(), opts)
	}
}
