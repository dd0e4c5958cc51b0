package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	kvfs "github.com/kvfs/kvfs/fs"
	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/store"
)

// Capacity, retention and pins (issue 10): `kvfs config`, `kvfs pin`,
// `kvfs unpin`, the mount's --capacity and --retention, the daemon's
// evictor, and their control socket routes.

// retainOptions are the mount's capacity flags.
type retainOptions struct {
	capacity   string        // --capacity, "" to leave the store's setting
	retention  string        // --retention, "" to leave it
	evictEvery time.Duration // how often the evictor looks without a kick
	minAge     time.Duration // --evict-min-age
}

func addRetainFlags(fs *pflag.FlagSet, o *retainOptions) {
	fs.StringVar(&o.capacity, "capacity", "", "keep stored bytes under SIZE (K, M, G, T suffixes; 0: unlimited) by evicting idle, unpinned files; saved in the store (kvfs config)")
	fs.StringVar(&o.retention, "retention", "", "eviction order: lru (least recently used first) or cost-size (GreedyDual); saved in the store (kvfs config)")
	fs.DurationVar(&o.evictEvery, "evict-interval", 5*time.Second, "testing: how often the evictor checks the capacity between commits")
	fs.MarkHidden("evict-interval")
	fs.DurationVar(&o.minAge, "evict-min-age", 10*time.Second, "never evict a file changed more recently than this: a writer's temporary file between its fsync and its rename is idle, and evicting it fails the rename that saves the snapshot")
}

// settings returns the key=value changes the flags ask for, checked.
func (o retainOptions) settings() (map[string]string, error) {
	kv := map[string]string{}
	if o.capacity != "" {
		kv["capacity"] = o.capacity
	}
	if o.retention != "" {
		kv["retention"] = o.retention
	}
	if o.minAge < 0 {
		return nil, usagef("--evict-min-age: want 0 or more, not %v", o.minAge)
	}
	for k, v := range kv {
		if err := store.CheckSetting(k, v); err != nil {
			return nil, usagef("--%s: %v", k, err)
		}
	}
	return kv, nil
}

// args are the flags for the daemon started in the background.
func (o retainOptions) args() []string {
	var a []string
	if o.capacity != "" {
		a = append(a, "--capacity", o.capacity)
	}
	if o.retention != "" {
		a = append(a, "--retention", o.retention)
	}
	return append(a, "--evict-interval", o.evictEvery.String(), "--evict-min-age", o.minAge.String())
}

// startRetention applies the mount's settings and starts the evictor,
// which drops each evicted file from the kernel's caches; stop ends it.
func startRetention(s *store.Store, srv *kvfs.Server, o retainOptions, log *slog.Logger) (stop func(), err error) {
	kv, err := o.settings()
	if err != nil {
		return nil, err
	}
	if len(kv) > 0 {
		if _, err := s.SetSettings(kv); err != nil {
			return nil, err
		}
	}
	s.SetEvictMinAge(o.minAge)
	s.OnEvict(func(e store.Evicted) { srv.Invalidate(e.Path) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); gc.Evictor(ctx, s, max(o.evictEvery, 10*time.Millisecond), log) }()
	s.KickEviction()
	return func() { cancel(); <-done }, nil
}

// registerRetention adds the control socket's routes for config and pins.
func registerRetention(mux *http.ServeMux, c *controlServer) {
	s := c.s
	mux.HandleFunc("GET /v1/config", c.slow(func(r *http.Request) (any, error) { return s.Settings(), nil }))
	mux.HandleFunc("POST /v1/config", c.slow(func(r *http.Request) (any, error) {
		kv := map[string]string{}
		for k, v := range r.URL.Query() {
			kv[k] = v[len(v)-1]
		}
		return s.SetSettings(kv)
	}))
	mux.HandleFunc("POST /v1/pin", c.slow(func(r *http.Request) (any, error) {
		q := r.URL.Query()
		return struct{}{}, s.KeepPath(q.Get("path"), q.Get("keep") == "1")
	}))
}

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("config", "[--json] STORE [KEY=VALUE...]", `Show the store's settings, or change them. Keys:
  capacity=SIZE    keep stored bytes under SIZE (K, M, G, T suffixes; 0: unlimited)
  low_water=PCT    eviction brings stored bytes down to PCT% of capacity (default 90)
  retention=lru|cost-size  which idle files go first
  chunking=content|fixed   how files of no format kvfs parses are cut from
                   now on: where their bytes say (default; shifted copies
                   dedup), or every chunk-size bytes from offset 0 (docs/ENGINES.md)
Settings are kept in the store. When the store is mounted they are changed
through the daemon, which applies them at once. Unmounted, config only
records them: the capacity is applied by the next kvfs put (after storing
the file, which is never the one evicted) or kvfs gc (before compacting)
of the unmounted store, which evict as the daemon does and say what, or
by the next mount.`)
	asJSON := fs.Bool("json", false, "print the settings as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return usagef("want STORE [KEY=VALUE...]")
	}
	kv := map[string]string{}
	for _, a := range fs.Args()[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return usagef("%q: want KEY=VALUE", a)
		}
		if err := store.CheckSetting(k, v); err != nil {
			return usagef("%v", err)
		}
		kv[k] = v
	}
	c, err := connect(fs.Arg(0))
	if err != nil {
		return err
	}
	defer c.Close()
	var got store.Settings
	switch c := c.(type) {
	case localClient:
		got = c.Settings()
		if len(kv) > 0 {
			got, err = c.SetSettings(kv)
		}
	case *socketClient:
		q := url.Values{}
		for k, v := range kv {
			q.Set(k, v)
		}
		method := "GET"
		if len(kv) > 0 {
			method = "POST"
		}
		_, err = c.do(method, "/v1/config", q, nil, &got)
	default:
		err = errors.New("config: unknown client")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(got)
	}
	capacity := "unlimited"
	if got.Capacity > 0 {
		capacity = fmt.Sprintf("%d (%s)", got.Capacity, formatBytes(got.Capacity))
	}
	fmt.Fprintf(stdout, "capacity=%s\nlow_water=%d%%\nretention=%s\nchunking=%s\n", capacity, got.LowWater, got.Retention, got.Chunking)
	return nil
}

func runPin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return pinCommand("pin", true, args, stderr)
}

func runUnpin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return pinCommand("unpin", false, args, stderr)
}

// pinCommand pins or unpins files: PATHs inside a mount (through the
// xattr user.kvfs.pin, as the calling user), or with --store, paths in a
// store (offline, or through its daemon).
func pinCommand(name string, keep bool, args []string, stderr io.Writer) error {
	about := "Pin files: a pinned file is never evicted to keep the store under its capacity."
	if !keep {
		about = "Unpin files: they may be evicted again (unpinning a file that is not pinned is not an error)."
	}
	fs := newFlags(name, "[--store STORE] PATH...", about+`
PATH is a file inside a kvfs mount (this sets or removes the attribute
user.kvfs.pin, as setfattr would), or with --store, a path in STORE.`)
	dir := fs.String("store", "", "PATHs are paths in this store (offline, or through its daemon)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return usagef("want PATH...")
	}
	if *dir == "" {
		for _, p := range fs.Args() {
			// Anywhere else the attribute would be set and mean nothing
			// (an ext4 file keeps user.kvfs.pin as any other attribute).
			if err := checkInKvfsMount(p); err != nil {
				return fmt.Errorf("%s %s: %w", name, p, err)
			}
			var err error
			if keep {
				err = unix.Setxattr(p, store.PinXattr, []byte("1"), 0)
			} else if err = unix.Removexattr(p, store.PinXattr); errors.Is(err, errNoAttr) {
				err = nil
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", name, p, err)
			}
		}
		return nil
	}
	c, err := connect(*dir)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, p := range fs.Args() {
		switch c := c.(type) {
		case localClient:
			err = c.KeepPath(p, keep)
		case *socketClient:
			k := "0"
			if keep {
				k = "1"
			}
			_, err = c.do("POST", "/v1/pin", url.Values{"path": {p}, "keep": {k}}, nil, new(struct{}))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkInKvfsMount fails unless path lies in a kvfs store's mount (not a
// pool mount, which keeps no pins), saying where it is instead.
func checkInKvfsMount(path string) error {
	e, ok, err := mountContaining(path)
	if err != nil {
		return err
	}
	switch {
	case !ok:
		return errors.New("not inside a kvfs mount (pin files in a mount, or a store's paths with --store STORE)")
	case e.Source == poolFsName:
		return fmt.Errorf("not inside a kvfs mount of a store (%s is a pool mount, which keeps no pins)", e.Point)
	case !e.isKvfs():
		return fmt.Errorf("not inside a kvfs mount (it is on the %s filesystem at %s; pin files in a kvfs mount, or a store's paths with --store STORE)", e.FSType, e.Point)
	}
	return nil
}
