package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/fs/poolfs"
)

// mountPool is kvfs mount --pool: STORE is this host's directory for the
// pool (its chunk cache, STORE/cache unless --cache says otherwise, the
// spool of files being written, and the daemon's log), made if missing;
// the mount serves the pool's names (fs/poolfs).
func mountPool(ctx context.Context, storeDir, mnt string, o mountOptions, allowOther bool, level slog.Level, stdout, stderr io.Writer) error {
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return fmt.Errorf("pool mount: %w", err)
	}
	if o.pool.cache == "" {
		o.pool.cache = filepath.Join(storeDir, "cache")
	}
	for _, p := range []*string{&o.pool.cache, &o.pool.credentials} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	if e, ok, _ := mountAt(mnt); ok && e.isKvfs() && !deadMount(mnt) {
		return fmt.Errorf("mount point %s is already a kvfs mount of %s (kvfs unmount %s first)", mnt, e.Source, mnt)
	}
	if fi, err := os.Stat(mnt); err != nil {
		return fmt.Errorf("mount point %s: %w", mnt, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", mnt)
	}
	if err := writePoolConfig(storeDir, &o.pool); err != nil {
		return err
	}
	if !o.foreground {
		return mountFailureHint(runtime.GOOS, daemonize([]string{storeDir, mnt}, storeDir, o, stdout))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	err := servePool(ctx, storeDir, mnt, o, allowOther, log)
	if o.readyFD == 0 {
		// Run by a user, not by daemonize (which explains it with what
		// fusermount3 wrote to the log).
		err = explainFusermount(err, nil)
	}
	return mountFailureHint(runtime.GOOS, err)
}

// servePool joins the pool, mounts it and serves it until unmounted.
func servePool(ctx context.Context, storeDir, mnt string, o mountOptions, allowOther bool, log *slog.Logger) error {
	sigs := catchStopSignals()
	defer signal.Stop(sigs)
	ready := readyReporter(o.readyFD)
	o.pool.verifyCache = o.verify // every cached chunk hashed at each read
	p, err := o.pool.open(ctx, os.Stderr)
	if err != nil {
		err = timedOut(err, o.pool.timeout, "--pool-timeout")
		ready("error: " + err.Error())
		return err
	}
	defer p.Close()
	srv, err := poolfs.Mount(mnt, poolfs.Options{
		Pool: p, SpoolDir: filepath.Join(storeDir, "spool"), Logger: log, AllowOther: allowOther,
		Timeout: o.timeout, KernelOptions: o.kernelOptions, DebugFUSE: o.debugFUSE, SimulateDarwin: o.simulateDarwin,
	})
	if err != nil {
		ready("error: " + err.Error())
		return err
	}
	log.Info("mounted", "pool", o.pool.pool, "endpoint", o.pool.endpoint, "etcd", o.pool.etcd, "cache", o.pool.cache, "mountpoint", mnt)
	ready("ok")
	return serveUntilUnmounted(srv, mnt, sigs, log)
}

// args are the flags that give a daemon the same pool.
func (f *poolFlags) args() []string {
	if f.pool == "" {
		return nil
	}
	a := []string{"--pool", f.pool, "--endpoint", f.endpoint, "--etcd", f.etcd, "--cache-size", f.cacheSize, "--pool-timeout", f.timeout.String()}
	if f.credentials != "" {
		a = append(a, "--credentials", f.credentials)
	}
	if f.cache != "" {
		a = append(a, "--cache", f.cache)
	}
	return a
}

// poolConfigFile, in a pool mount's STORE, names the pool the directory
// serves, so that kvfs stats STORE can report on it. It holds no
// credentials (only the path of a --credentials file, if one was given).
const poolConfigFile = "pool.json"

type poolConfig struct {
	Pool        string `json:"pool"`
	Endpoint    string `json:"endpoint"`
	Etcd        string `json:"etcd"`
	Credentials string `json:"credentials,omitempty"`
	Cache       string `json:"cache"`
	CacheSize   string `json:"cache_size"`
}

func writePoolConfig(storeDir string, f *poolFlags) error {
	b, err := json.MarshalIndent(poolConfig{f.pool, f.endpoint, f.etcd, f.credentials, f.cache, f.cacheSize}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(storeDir, poolConfigFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("pool mount: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pool mount: %w", err)
	}
	return nil
}

// readPoolConfig returns the pool flags a pool mount's STORE was last
// mounted with; ok false if STORE is not a pool mount's directory.
//
// The file says where to connect and what to read (a credentials file, a
// cache directory), so it counts only where a pool mount could have
// written it: not in a store (STORE/kvfs.db), a regular file (not a
// link), owned by this user or root, and writable by no one else.
func readPoolConfig(storeDir string, timeout time.Duration) (f poolFlags, ok bool, err error) {
	if _, err := os.Stat(filepath.Join(storeDir, "kvfs.db")); err == nil {
		return f, false, nil
	}
	path := filepath.Join(storeDir, poolConfigFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		// A directory this user may not read is not a pool mount's of
		// theirs (a pool mount makes its directory for its user): the
		// store commands say whose it is.
		return f, false, nil
	}
	if err != nil {
		return f, false, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 || st == nil || st.Uid != 0 && int(st.Uid) != os.Geteuid() || fi.Size() > 1<<20 {
		return f, false, fmt.Errorf("%s: not a pool mount's record (want a regular file of this user or root, writable by no one else)", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return f, false, err
	}
	var c poolConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return f, false, fmt.Errorf("%s: %w", path, err)
	}
	return poolFlags{pool: c.Pool, endpoint: c.Endpoint, etcd: c.Etcd, credentials: c.Credentials,
		cache: c.Cache, cacheSize: c.CacheSize, timeout: timeout}, true, nil
}
