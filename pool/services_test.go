package pool_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// pause stops one service's process ("etcd", "s3") with SIGSTOP: a hung
// server, whose port still accepts connections that are never answered
// (a stopped one refuses them). It is resumed at the end of the test,
// before the services are stopped.
func (s *services) pause(t testing.TB, which string) {
	t.Helper()
	s.signal(t, which, syscall.SIGSTOP)
	t.Cleanup(func() { s.signal(t, which, syscall.SIGCONT) })
}

// resume undoes pause.
func (s *services) resume(t testing.TB, which string) {
	t.Helper()
	s.signal(t, which, syscall.SIGCONT)
}

func (s *services) signal(t testing.TB, which string, sig syscall.Signal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, which+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s.pid: %v", which, err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("%v to %s (pid %d): %v", sig, which, pid, err)
	}
}

// logBuffer keeps what a host logs, for tests that count lines, and
// passes it on to the test's log.
type logBuffer struct {
	t  testing.TB
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(b)
	l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// count is the number of lines logged that contain every one of subs.
func (l *logBuffer) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range strings.Split(l.b.String(), "\n") {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// logger is a logger at warning level into l.
func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
