package pool_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// hangTimeout is the hosts' OpTimeout in the tests of hung services:
// short, so that the one call that waits it out costs little, and far
// above what a read served from the cache may take (fast).
const (
	hangTimeout = 3 * time.Second
	fast        = time.Second
)

// hungHost is a host with a cache, whose log the test reads.
func hungHost(t *testing.T, s *services) (*pool.Pool, *logBuffer) {
	logs := &logBuffer{t: t}
	cfg := s.config(t, t.TempDir())
	cfg.OpTimeout = hangTimeout
	cfg.Logger = logs.logger()
	return s.host(t, cfg), logs
}

// timed runs fn and returns how long it took.
func timed(fn func()) time.Duration {
	start := time.Now()
	fn()
	return time.Since(start)
}

// TestS3Hangs (issue 26): with the S3 server hung (SIGSTOP: connections
// are accepted and never answered), a host reads what its cache holds at
// the cache's speed: a new open of a file whose chunks are all cached does
// not ask S3 whether its packs exist. What needs S3 fails after at most
// one OpTimeout, naming the endpoint, and then at once (the circuit is
// open) until a probe finds S3 back; the host then reads it without a
// restart. The log says once that S3 does not answer, and once that it
// answers again.
func TestS3Hangs(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	b, logs := hungHost(t, s)
	cached := randBytes(1_500_000, 21) // two packs
	cold := randBytes(700_000, 22)
	for name, data := range map[string][]byte{"cached": cached, "cold": cold} {
		if err := a.Publish(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	readBack(t, b, "cached", cached) // into B's cache
	// B knows cold's manifest and has it open, but holds none of its chunks.
	fcold, err := b.Open(ctx, "cold")
	if err != nil {
		t.Fatal(err)
	}

	s.pause(t, "s3")
	if d := timed(func() { readBack(t, b, "cached", cached) }); d > fast {
		t.Fatalf("open and read of a cached file with S3 hung took %v (OpTimeout %v): it waited on S3", d, hangTimeout)
	}
	endpoint := s.env["KVFS_ENDPOINT"]
	var first error
	d := timed(func() { _, first = b.Open(ctx, "cold") })
	if first == nil {
		t.Fatal("open of a file whose chunks are not cached, S3 hung: no error")
	}
	if d > hangTimeout+2*time.Second {
		t.Fatalf("open needing S3, S3 hung: failed after %v, want at most about one OpTimeout (%v)", d, hangTimeout)
	}
	t.Logf("open needing S3, S3 hung: failed after %v: %v", d.Round(time.Millisecond), first)
	for i := range 3 {
		var err error
		if d := timed(func() { _, err = b.Open(ctx, "cold") }); err == nil || d > fast/4 {
			t.Fatalf("open %d needing S3 after a timeout: %v after %v, want an error at once (the circuit open)", i, err, d)
		} else if !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "cold") {
			t.Fatalf("open needing S3, circuit open: %q names neither the endpoint %s nor the file", err, endpoint)
		} else if i == 0 {
			t.Logf("open needing S3, circuit open: failed after %v: %v", d, err)
		}
	}
	if d := timed(func() { _, err = fcold.ReadAt(make([]byte, 100), 1000) }); err == nil || d > fast/4 {
		t.Fatalf("read of an uncached chunk, circuit open: %v after %v, want an error at once", err, d)
	}
	b2 := randBytes(100_000, 23)
	if d := timed(func() { err = b.Publish(ctx, "new", bytes.NewReader(b2), int64(len(b2))) }); err == nil || d > fast {
		t.Fatalf("publish, circuit open: %v after %v, want an error at once", err, d)
	}
	if d := timed(func() { readBack(t, b, "cached", cached) }); d > fast {
		t.Fatalf("cached read, circuit open: took %v", d)
	}

	s.resume(t, "s3")
	eventually(t, "open once S3 is back", func() error {
		_, err := b.Open(ctx, "cold")
		return err
	})
	readBack(t, b, "cold", cold)
	if _, err := io.ReadAll(io.NewSectionReader(fcold, 0, fcold.Size())); err != nil {
		t.Fatalf("read of the file opened before the hang, S3 back: %v", err)
	}
	if n := logs.count("circuit open", "S3", endpoint); n != 1 {
		t.Errorf("the log says %d times that S3 does not answer, want once", n)
	}
	if n := logs.count("circuit closed", "S3", endpoint); n != 1 {
		t.Errorf("the log says %d times that S3 answers again, want once", n)
	}
}

// TestEtcdHangs (issue 26): with etcd hung, a file open before reads on
// at the cache's speed; what needs etcd (an open by name, a publish)
// fails after at most one OpTimeout naming etcd, and then at once until a
// probe finds etcd back; the log says so once each way.
func TestEtcdHangs(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	b, logs := hungHost(t, s)
	data := randBytes(900_000, 24)
	if err := a.Publish(ctx, "seen", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	readBack(t, b, "seen", data)
	f, err := b.Open(ctx, "seen")
	if err != nil {
		t.Fatal(err)
	}

	s.pause(t, "etcd")
	if d := timed(func() {
		got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read of an open file, etcd hung: %v", err)
		}
	}); d > fast {
		t.Fatalf("read of an open cached file, etcd hung: took %v", d)
	}
	var first error
	d := timed(func() { _, first = b.Open(ctx, "seen") })
	if first == nil || !strings.Contains(first.Error(), "etcd") {
		t.Fatalf("open by name, etcd hung: %v, want an error naming etcd", first)
	}
	if d > hangTimeout+2*time.Second {
		t.Fatalf("open by name, etcd hung: failed after %v, want at most about one OpTimeout (%v)", d, hangTimeout)
	}
	t.Logf("open by name, etcd hung: failed after %v: %v", d.Round(time.Millisecond), first)
	etcd := s.env["KVFS_ETCD"]
	for i := range 3 {
		var err error
		if d := timed(func() { _, err = b.Open(ctx, "seen") }); err == nil || d > fast/4 {
			t.Fatalf("open %d by name after a timeout: %v after %v, want an error at once", i, err, d)
		} else if !strings.Contains(err.Error(), etcd) || !strings.Contains(err.Error(), "seen") {
			t.Fatalf("open by name, circuit open: %q names neither etcd %s nor the file", err, etcd)
		} else if i == 0 {
			t.Logf("open by name, circuit open: failed after %v: %v", d, err)
		}
	}
	small := randBytes(100_000, 25)
	if d := timed(func() { err = b.Publish(ctx, "new", bytes.NewReader(small), int64(len(small))) }); err == nil || d > fast {
		t.Fatalf("publish, etcd's circuit open: %v after %v, want an error at once", err, d)
	}

	s.resume(t, "etcd")
	eventually(t, "open once etcd is back", func() error {
		_, err := b.Open(ctx, "seen")
		return err
	})
	if err := b.Publish(ctx, "new", bytes.NewReader(small), int64(len(small))); err != nil {
		t.Fatalf("publish once etcd is back: %v", err)
	}
	readBack(t, a, "new", small)
	if n := logs.count("circuit open", "etcd", etcd); n != 1 {
		t.Errorf("the log says %d times that etcd does not answer, want once", n)
	}
	if n := logs.count("circuit closed", "etcd", etcd); n != 1 {
		t.Errorf("the log says %d times that etcd answers again, want once", n)
	}
}
