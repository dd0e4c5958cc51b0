package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPoolConfigTrusted: kvfs stats DIR reads DIR/pool.json only where a
// pool mount could have written it, and a credentials file that is not a
// regular file is refused at once, never waited on (red team 21: a FIFO
// hung kvfs stats).
func TestPoolConfigTrusted(t *testing.T) {
	dir := t.TempDir()
	f := poolFlags{pool: "s3://b/p", endpoint: "http://127.0.0.1:1", etcd: "127.0.0.1:2", cache: "/c", cacheSize: "1G"}
	if err := writePoolConfig(dir, &f); err != nil {
		t.Fatal(err)
	}
	got, ok, err := readPoolConfig(dir, time.Second)
	if err != nil || !ok || got.pool != f.pool || got.etcd != f.etcd || got.cache != f.cache {
		t.Fatalf("read back: %+v, %v, %v", got, ok, err)
	}
	path := filepath.Join(dir, poolConfigFile)
	os.Chmod(path, 0o666)
	if _, _, err := readPoolConfig(dir, time.Second); err == nil || !strings.Contains(err.Error(), "not a pool mount's record") {
		t.Fatalf("a pool.json others may write: %v", err)
	}
	os.Chmod(path, 0o600)
	link := t.TempDir()
	os.Symlink(path, filepath.Join(link, poolConfigFile))
	if _, _, err := readPoolConfig(link, time.Second); err == nil {
		t.Fatal("a pool.json that is a link was trusted")
	}
	// A store's directory is a store, whatever else lies in it.
	os.WriteFile(filepath.Join(dir, "kvfs.db"), nil, 0o600)
	if _, ok, err := readPoolConfig(dir, time.Second); ok || err != nil {
		t.Fatalf("a store with a pool.json: %v, %v", ok, err)
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := readCredentials(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("credentials from a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading credentials from a FIFO hangs")
	}
}

// TestPoolFlagsAfterSubcommand: kvfs pool's flags work after the
// subcommand, as every other command's do: "pool ls --pool URL" failed
// with "pool ls: wrong number of arguments".
func TestPoolFlagsAfterSubcommand(t *testing.T) {
	for _, k := range []string{"KVFS_POOL", "KVFS_ENDPOINT", "KVFS_ETCD"} {
		t.Setenv(k, "")
	}
	for _, args := range [][]string{
		{"pool", "ls", "--pool", "s3://b/p"},
		{"pool", "ls", "models/", "--pool=s3://b/p"},
		{"pool", "stats", "--pool", "s3://b/p", "--cache", t.TempDir()},
	} {
		code, _, errOut := runCmd(args...)
		if code != exitUsage || !strings.Contains(errOut, "a pool needs --pool, --endpoint and --etcd") {
			t.Errorf("kvfs %v: exit %d: %s", args, code, errOut)
		}
	}
}
