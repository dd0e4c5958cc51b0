package pool_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// services are an etcd and an S3 server (versitygw) on 127.0.0.1,
// started by scripts/services, as a user would start them. The tests
// never skip without them: scripts/services installs what is missing.
type services struct {
	dir string
	env map[string]string
}

// startServices starts a fresh pair in dir and stops it at the end of
// the test.
func startServices(t testing.TB) *services {
	t.Helper()
	dir := t.TempDir()
	s := &services{dir: dir}
	s.start(t)
	t.Cleanup(func() { s.stop(t, "") })
	return s
}

func (s *services) script(t testing.TB, args ...string) []byte {
	t.Helper()
	script, err := filepath.Abs("../scripts/services")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), "KVFS_SERVICES_DIR="+s.dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/services %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func (s *services) start(t testing.TB) {
	t.Helper()
	out := s.script(t, "start")
	s.env = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			s.env[k] = v
		}
	}
	for _, k := range []string{"KVFS_POOL", "KVFS_ENDPOINT", "KVFS_ETCD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if s.env[k] == "" {
			t.Fatalf("scripts/services start printed no %s:\n%s", k, out)
		}
	}
}

// stop stops one service ("etcd", "s3") or both ("").
func (s *services) stop(t testing.TB, which string) {
	t.Helper()
	if which == "" {
		s.script(t, "stop")
	} else {
		s.script(t, "stop", which)
	}
}

// config is a host's configuration for the services' pool, with its own
// cache, small chunks and packs (so that small files span many of both)
// and short timeouts.
func (s *services) config(t testing.TB, cacheDir string) pool.Config {
	return pool.Config{
		S3: pool.S3Config{
			Pool:      s.env["KVFS_POOL"],
			Endpoint:  s.env["KVFS_ENDPOINT"],
			AccessKey: s.env["AWS_ACCESS_KEY_ID"],
			SecretKey: s.env["AWS_SECRET_ACCESS_KEY"],
		},
		Etcd:       []string{s.env["KVFS_ETCD"]},
		CacheDir:   cacheDir,
		CacheBytes: 64 << 20,
		ChunkSize:  64 << 10,
		PackBytes:  1 << 20,
		LeaseTTL:   2 * time.Second,
		OpTimeout:  5 * time.Second,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// host joins the pool as one host, with its own cache.
func (s *services) host(t testing.TB, cfg pool.Config) *pool.Pool {
	t.Helper()
	p, err := pool.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
