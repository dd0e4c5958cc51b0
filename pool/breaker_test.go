package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// lockedLog is a log that tests count lines of.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(b)
}

func (l *lockedLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// testBreaker is a breaker with a short timeout and probe period, whose
// service answers probes while up is set.
func testBreaker() (*breaker, *atomic.Bool, *lockedLog) {
	up := &atomic.Bool{}
	log := &lockedLog{}
	b := newBreaker("S3", "http://s3.test:9000", ErrS3Down, 50*time.Millisecond, func(ctx context.Context) error {
		if up.Load() {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}, slog.New(slog.NewTextHandler(log, nil)))
	b.every = 20 * time.Millisecond
	return b, up, log
}

// hang is a call to a service that does not answer.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("stat s3://b/x: %w", ctx.Err())
}

// TestBreaker: a call that times out opens the circuit (once, however
// many calls time out together); calls then fail at once with an error
// that names the service, its endpoint and the failure, without being
// made; a probe that succeeds closes the circuit; the log says each once.
func TestBreaker(t *testing.T) {
	b, up, log := testBreaker()
	defer b.close()
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.do(context.Background(), "", hang); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a call that hangs: %v", err)
			}
		}()
	}
	wg.Wait()
	if !b.isOpen() {
		t.Fatal("the circuit is closed after calls timed out")
	}
	made := false
	start := time.Now()
	err := b.do(context.Background(), "", func(context.Context) error { made = true; return nil })
	if made || !errors.Is(err, ErrS3Down) || time.Since(start) > 10*time.Millisecond {
		t.Fatalf("a call with the circuit open: made %v, %v after %v", made, err, time.Since(start))
	}
	for _, want := range []string{"S3", "http://s3.test:9000", "stat s3://b/x", "deadline exceeded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if n := log.count("circuit open: S3"); n != 1 {
		t.Errorf("the log says %d times that the circuit opened, want once", n)
	}
	time.Sleep(5 * b.every)
	if !b.isOpen() {
		t.Fatal("the circuit closed while the service does not answer probes")
	}
	up.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for b.isOpen() {
		if time.Now().After(deadline) {
			t.Fatal("the circuit is still open 5 s after the service answers probes")
		}
		time.Sleep(b.every)
	}
	if err := b.do(context.Background(), "", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a call after the circuit closed: %v", err)
	}
	if n := log.count("circuit closed: S3"); n != 1 {
		t.Errorf("the log says %d times that the circuit closed, want once", n)
	}
	// A call that started before the circuit closed and fails after it
	// does not open it again: that failure is old news.
	b.failed(start, errors.New("old"))
	if b.isOpen() {
		t.Fatal("a failure of a call from before the close opened the circuit")
	}
}

// TestBreakerWhatCounts: an answer, even an error, keeps the circuit
// closed, and so does the caller's own cancellation or deadline; a
// refused connection opens it, as a timeout does.
func TestBreakerWhatCounts(t *testing.T) {
	b, _, _ := testBreaker()
	defer b.close()
	answers := []error{ErrNoObject, errors.New("access denied"), nil}
	for _, e := range answers {
		b.do(context.Background(), "", func(context.Context) error { return e })
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	b.do(cancelled, "", hang)
	short, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	b.do(short, "", hang) // the caller's deadline, before the breaker's
	if b.isOpen() {
		t.Fatal("the circuit opened on an answer or on the caller's own cancellation")
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	b.do(context.Background(), "get k", func(context.Context) error { return fmt.Errorf("wrapped: %w", refused) })
	if !b.isOpen() {
		t.Fatal("a refused connection left the circuit closed")
	}
	if err := b.check(); !strings.Contains(err.Error(), "get k: wrapped") {
		t.Fatalf("%q does not name the call that failed", err)
	}
}

// TestBreakerClose: after close, the prober stops and failures open
// nothing (the pool is closing its clients).
func TestBreakerClose(t *testing.T) {
	b, _, _ := testBreaker()
	b.close()
	b.close()
	b.do(context.Background(), "", hang)
	if b.isOpen() {
		t.Fatal("a failure after close opened the circuit")
	}
}
