package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
)

// poolFlags are the flags that name a shared pool (pool/doc.go), with the
// environment variables scripts/services prints as their defaults.
type poolFlags struct {
	pool, endpoint, etcd, credentials, cache string
	cacheSize                                string
	timeout                                  time.Duration
	// verifyCache: kvfs mount --verify (pool.Config.VerifyCache).
	verifyCache bool
}

func (f *poolFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.pool, "pool", os.Getenv("KVFS_POOL"), "the shared pool, s3://BUCKET/PREFIX (default $KVFS_POOL)")
	fs.StringVar(&f.endpoint, "endpoint", os.Getenv("KVFS_ENDPOINT"), "the S3 server's URL, http://HOST:PORT or https://HOST:PORT (default $KVFS_ENDPOINT)")
	fs.StringVar(&f.etcd, "etcd", os.Getenv("KVFS_ETCD"), "etcd's client endpoints, HOST:PORT[,HOST:PORT...] (default $KVFS_ETCD)")
	fs.StringVar(&f.credentials, "credentials", "", "a file with the S3 credentials, as AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines or an AWS credentials file (default: those environment variables)")
	fs.StringVar(&f.cache, "cache", "", "this host's local chunk cache directory (default: none)")
	fs.StringVar(&f.cacheSize, "cache-size", "1G", "the local chunk cache's bound (K, M, G, T suffixes)")
	fs.DurationVar(&f.timeout, "pool-timeout", 30*time.Second, "how long one call to S3 or etcd may take before the operation fails; after one such failure, calls to that service fail at once until it answers again")
}

// open joins the pool the flags name.
func (f *poolFlags) open(ctx context.Context, stderr io.Writer) (*pool.Pool, error) {
	if f.pool == "" || f.endpoint == "" || f.etcd == "" {
		return nil, usagef("a pool needs --pool, --endpoint and --etcd (or KVFS_POOL, KVFS_ENDPOINT and KVFS_ETCD; scripts/services start prints them)")
	}
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if f.credentials != "" {
		var err error
		if key, secret, err = readCredentials(f.credentials); err != nil {
			return nil, err
		}
	}
	size, err := store.ParseSize(f.cacheSize)
	if err != nil {
		return nil, usagef("--cache-size: %v", err)
	}
	if f.timeout <= 0 {
		return nil, usagef("--pool-timeout: want a positive duration")
	}
	return pool.Open(ctx, pool.Config{
		S3:          pool.S3Config{Pool: f.pool, Endpoint: f.endpoint, AccessKey: key, SecretKey: secret},
		Etcd:        strings.Split(f.etcd, ","),
		CacheDir:    f.cache,
		CacheBytes:  size,
		VerifyCache: f.verifyCache,
		OpTimeout:   f.timeout,
		Logger:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
}

// readCredentials reads S3 credentials from a file of KEY=VALUE lines
// (an optional "export " before each, as scripts/services prints them) or
// an AWS credentials file (KEY = VALUE under [default]).
func readCredentials(path string) (key, secret string, err error) {
	// Without blocking: a FIFO (or a device) named as the file would
	// hang the command at open (red team 21).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", "", fmt.Errorf("credentials: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return "", "", fmt.Errorf("credentials: %w", err)
	} else if !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return "", "", fmt.Errorf("credentials %s: not a regular file of at most 1 MiB", path)
	}
	sc := bufio.NewScanner(f)
	section := "default"
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || section != "default" {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.ToUpper(strings.TrimSpace(k)) {
		case "AWS_ACCESS_KEY_ID":
			key = v
		case "AWS_SECRET_ACCESS_KEY":
			secret = v
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("credentials %s: %w", path, err)
	}
	if key == "" || secret == "" {
		return "", "", fmt.Errorf("credentials %s: no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in it", path)
	}
	return key, secret, nil
}

func runPool(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var pf poolFlags
	err := runPoolFlags(ctx, &pf, args, stdout, stderr)
	return timedOut(err, pf.timeout, "--pool-timeout")
}

// runPoolFlags is runPool, parsing its flags into pf.
func runPoolFlags(ctx context.Context, pf *poolFlags, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pool", "[flags] put LOCAL NAME | get NAME LOCAL | ls [PREFIX] | rm NAME... | stats", `Use a pool that several hosts share: files as immutable pack and manifest
objects in an S3-compatible object store, names in etcd (pool/doc.go). What
one host puts, every host lists and gets; chunks a host knows the pool holds
are not uploaded again. Every chunk read is checked against its sha256: a
chunk missing or damaged fails the read, never returns wrong bytes.

  put LOCAL NAME   publish a local file under NAME (replacing what NAME was)
  get NAME LOCAL   copy a pool file out (LOCAL "-" is standard output)
  ls [PREFIX]      list the names under PREFIX
  rm NAME...       remove names; kvfs gc --pool reclaims their objects
  stats            print what the pool holds (names, bytes, dedup, objects,
                   dead bytes) and this host's cache (--cache)

To try a pool on one machine: eval "$(scripts/services start)".`)
	pf.add(fs)
	// Flags go before or after the subcommand and its arguments, as
	// elsewhere (kvfs pool ls --pool URL); a NAME that starts with "-"
	// follows "--".
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want put, get, ls, rm or stats")
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	want := map[string][2]int{"put": {2, 2}, "get": {2, 2}, "ls": {0, 1}, "rm": {1, 1 << 20}, "stats": {0, 0}}
	n, ok := want[sub]
	if !ok {
		return usagef("unknown pool command %q: want put, get, ls, rm or stats", sub)
	}
	if len(rest) < n[0] || len(rest) > n[1] {
		return usagef("pool %s: wrong number of arguments", sub)
	}
	of := pf
	if sub == "stats" {
		of = pf.withoutCache()
	}
	p, err := of.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer p.Close()
	switch sub {
	case "put":
		f, err := os.Open(rest[0])
		if err != nil {
			return fmt.Errorf("put: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("put: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("put %s: not a regular file", rest[0])
		}
		return p.Publish(ctx, rest[1], f, fi.Size())
	case "get":
		return poolGet(ctx, p, rest[0], rest[1], stdout)
	case "ls":
		prefix := ""
		if len(rest) == 1 {
			prefix = rest[0]
		}
		names, err := p.List(ctx, prefix)
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Fprintln(stdout, displayName(n))
		}
	case "rm":
		var first error
		for _, name := range rest {
			if err := p.Remove(ctx, name); err != nil {
				fmt.Fprintf(stderr, "kvfs pool rm: %v\n", err)
				first = cmp(first, err)
			}
		}
		if first != nil {
			return exitStatus{code: exitFailure}
		}
	case "stats":
		return printPoolStats(ctx, p, pf, stdout)
	}
	return nil
}

// withoutCache is f for a command that only scans the cache: it may be a
// running daemon's, which opening it (and evicting to its bound) would
// disturb.
func (f *poolFlags) withoutCache() *poolFlags {
	c := *f
	c.cache = ""
	return &c
}

// printPoolStats prints what the pool holds, as every host sees it, and
// this host's cache (scanned, not opened: it may be a daemon's).
func printPoolStats(ctx context.Context, p *pool.Pool, pf *poolFlags, stdout io.Writer) error {
	u, err := p.Usage(ctx)
	if err != nil {
		return fmt.Errorf("stats %s: %w", pf.pool, err)
	}
	fmt.Fprintf(stdout, "pool:          %s\n", pf.pool)
	fmt.Fprintf(stdout, "names:         %d\n", u.Names)
	fmt.Fprintf(stdout, "logical bytes: %d (%s)\n", u.LogicalBytes, formatBytes(u.LogicalBytes))
	fmt.Fprintf(stdout, "live bytes:    %d (%s): the distinct chunks the names reach\n", u.LiveBytes, formatBytes(u.LiveBytes))
	fmt.Fprintf(stdout, "dedup ratio:   %s\n", dedupRatio(u.DedupRatio(), u.LiveBytes))
	fmt.Fprintf(stdout, "objects:       %d manifests, %d packs of %s\n", u.Manifests, u.Packs, formatBytes(u.PackBytes))
	fmt.Fprintf(stdout, "dead bytes:    %d (%s): pack bytes no name reaches (kvfs gc --pool reclaims them)\n", u.DeadBytes, formatBytes(u.DeadBytes))
	if pf.cache == "" {
		fmt.Fprintf(stdout, "cache:         none\n")
		return nil
	}
	n, b, err := pool.ScanCache(pf.cache)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	fmt.Fprintf(stdout, "cache:         %d chunks, %s of %s (%s)\n", n, formatBytes(b), pf.cacheSize, pf.cache)
	return nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func orNone(s string) string {
	if s == "" {
		return "no cache directory"
	}
	return s
}

// poolGet copies a pool file to local (a new file, written whole before
// it takes its name) or to w.
func poolGet(ctx context.Context, p *pool.Pool, name, local string, w io.Writer) error {
	f, err := p.Open(ctx, name)
	if err != nil {
		return err
	}
	src := io.NewSectionReader(f, 0, f.Size())
	if local == "-" {
		_, err := io.Copy(w, src)
		return err
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, path.Base(name))
	} else if err == nil && !fi.Mode().IsRegular() {
		// A device or a pipe (/dev/null, a FIFO) is written into, as cp
		// does, never replaced by a file renamed over it.
		out, err := os.OpenFile(local, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("get %s: %w", name, err)
		}
		_, err = io.Copy(out, src)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("get %s into %s: %w", name, local, err)
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), ".kvfs-get-*")
	if err != nil {
		// Named for the destination, not the temporary file.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("get %s: write %s: %w (the directory %s does not exist)", name, local, err, filepath.Dir(local))
		}
		return fmt.Errorf("get %s: write %s: %w", name, local, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("get %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("get %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return fmt.Errorf("get %s: %w", name, err)
	}
	return nil
}

// runPoolGC is kvfs gc --pool: one collection of the shared pool.
func runPoolGC(ctx context.Context, pf *poolFlags, opts pool.CollectOptions, stdout, stderr io.Writer) error {
	return timedOut(collectPool(ctx, pf, opts, stdout, stderr), pf.timeout, "--pool-timeout")
}

// collectPool is runPoolGC.
func collectPool(ctx context.Context, pf *poolFlags, opts pool.CollectOptions, stdout, stderr io.Writer) error {
	p, err := pf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer p.Close()
	st, err := p.Collect(ctx, opts)
	if err != nil {
		return fmt.Errorf("gc %s: %w", pf.pool, err)
	}
	dry, grace := opts.DryRun, opts.Grace
	verb, rverb := "deleted", "rewrote"
	if dry {
		verb, rverb = "would delete", "would rewrite"
	}
	if e := st.Evict; opts.Capacity > 0 {
		everb := "removed"
		if dry {
			everb = "would remove"
		}
		fmt.Fprintf(stdout, "%s: names reach %s, capacity %s: %s %d names, least recently used first, leaving %s",
			pf.pool, formatBytes(e.LiveBefore), formatBytes(opts.Capacity), everb, e.Names, formatBytes(e.LiveAfter))
		if e.Recent > 0 {
			fmt.Fprintf(stdout, "; %d names used within %v kept", e.Recent, opts.MinIdle)
		}
		if e.Changed > 0 {
			fmt.Fprintf(stdout, "; %d names changed meanwhile and kept", e.Changed)
		}
		fmt.Fprintln(stdout)
	}
	if r := st.Repack; r.Packs > 0 {
		fmt.Fprintf(stdout, "%s: %s %d sparse packs (%s of live chunks copied into %d new packs); %d names moved, %d changed meanwhile and kept\n",
			pf.pool, rverb, r.Packs, formatBytes(r.CopiedBytes), r.NewPacks, r.Names, r.Skipped)
	}
	if r := st.Repack; r.Damaged > 0 {
		fmt.Fprintf(stderr, "kvfs gc: %d sparse packs not rewritten: a chunk of theirs is damaged or missing (logged above)\n", r.Damaged)
	}
	fmt.Fprintf(stdout, "%s: %d names, %d objects live; %s %d objects (%s); kept %d unreached objects younger than %v\n",
		pf.pool, st.Names, st.LiveObjects, verb, st.Deleted, formatBytes(st.DeletedBytes), st.YoungKept, grace)
	if st.DanglingNames > 0 {
		fmt.Fprintf(stderr, "kvfs gc: %d names point to missing or damaged manifests (logged above)\n", st.DanglingNames)
	}
	return nil
}
