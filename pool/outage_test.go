package pool_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestServicesUnreachable: with S3 stopped, and then with etcd stopped,
// a host keeps reading the chunks it has cached (an open file, and a new
// open of a file whose chunks are all cached while S3 is down); a publish
// fails with an error naming the service within a bounded time and
// leaves no name; once the service is back (and a probe has found it:
// until then its circuit is open, breaker.go), the same host publishes
// and reads again without a restart.
func TestServicesUnreachable(t *testing.T) {
	s := startServices(t)
	cfg := s.config(t, t.TempDir())
	cfg.OpTimeout = 2 * time.Second
	a := s.host(t, cfg)
	data := randBytes(900_000, 11)
	if err := a.Publish(ctx, "cached", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	f, err := a.Open(ctx, "cached")
	if err != nil {
		t.Fatal(err)
	}
	readBack(t, a, "cached", data) // fills the cache

	fails := func(name, service string) {
		t.Helper()
		b := randBytes(300_000, 12)
		start := time.Now()
		err := a.Publish(ctx, name, bytes.NewReader(b), int64(len(b)))
		took := time.Since(start)
		if err == nil {
			t.Fatalf("publish with %s down succeeded", service)
		}
		if !strings.Contains(err.Error(), service) {
			t.Fatalf("publish with %s down: %v (does not name %s)", service, err, service)
		}
		// Each call is bounded by OpTimeout (2 s); a publish makes a few
		// calls, and starts over at most three times.
		if took > 40*time.Second {
			t.Fatalf("publish with %s down took %v", service, took)
		}
		t.Logf("publish with %s down: failed after %v: %v", service, took.Round(time.Millisecond), err)
	}
	readOpen := func() {
		t.Helper()
		got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read of the open file: %v", err)
		}
	}

	s.stop(t, "s3")
	readOpen()
	readBack(t, a, "cached", data) // a new open, from the cache
	fails("new", "s3://")
	s.start(t)
	after := randBytes(500_000, 13)
	eventually(t, "publish once S3 is back", func() error {
		return a.Publish(ctx, "after-s3", bytes.NewReader(after), int64(len(after)))
	})
	if names, err := a.List(ctx, "new"); err != nil || len(names) != 0 {
		t.Fatalf("a failed publish left a name: %q, %v", names, err)
	}

	s.stop(t, "etcd")
	readOpen()
	fails("new", "etcd")
	s.start(t)
	eventually(t, "publish once etcd is back", func() error {
		return a.Publish(ctx, "after-etcd", bytes.NewReader(after), int64(len(after)))
	})
	b := s.host(t, s.config(t, ""))
	readBack(t, b, "after-s3", after)
	readBack(t, b, "after-etcd", after)
	readBack(t, b, "cached", data)
}

// eventually retries fn until it succeeds, for at most 10 s: a service
// that is back is called again once a probe has found it (every second).
func eventually(t testing.TB, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
