package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrEtcdDown and ErrS3Down are the errors of calls not made because the
// service did not answer an earlier one (its circuit is open): a caller
// with another source (a mount's last listing and versions, the local
// cache) turns to it at once instead of after OpTimeout.
var (
	ErrEtcdDown = errors.New("etcd is unreachable")
	ErrS3Down   = errors.New("S3 is unreachable")
)

// errNoAnswer is the cause of a context whose OpTimeout ran out (Pool.op,
// breaker.begin): the service did not answer in time. A deadline of the
// caller's own, or a cancellation, is not the service's fault.
var errNoAnswer = errors.New("no answer within the pool timeout")

// probeEvery is how often a service whose circuit is open is asked
// whether it answers again.
const probeEvery = time.Second

// breaker is a circuit breaker for one service (S3 or etcd): a call that
// the service does not answer within the timeout (or whose connection is
// refused or reset) opens the circuit; while it is open, calls fail at
// once with an error that names the service, its endpoint and the
// failure, and one prober asks the service every probeEvery until it
// answers, which closes the circuit. The log says once that the circuit
// opened and once that it closed. A call that started before the circuit
// last closed does not open it again: its failure is old news.
//
// Its methods are safe for concurrent use.
type breaker struct {
	name     string // "S3", "etcd": in the log, and what down names
	endpoint string
	down     error         // ErrS3Down or ErrEtcdDown
	timeout  time.Duration // bounds each call (Config.OpTimeout)
	every    time.Duration // between probes
	ping     func(context.Context) error
	log      *slog.Logger
	stop     chan struct{} // closed by close: the prober returns

	mu       sync.Mutex // guards the fields below
	open     bool
	since    time.Time // when the circuit opened
	cause    error     // the failure that opened it
	closedAt time.Time // when it last closed
	probing  bool
	stopped  bool
}

func newBreaker(name, endpoint string, down error, timeout time.Duration, ping func(context.Context) error, log *slog.Logger) *breaker {
	return &breaker{name: name, endpoint: endpoint, down: down, timeout: timeout, every: probeEvery, ping: ping, log: log, stop: make(chan struct{})}
}

// isOpen reports whether calls fail at once now.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// check returns the error of a call made while the circuit is open, or
// nil.
func (b *breaker) check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return nil
	}
	return fmt.Errorf("%w: %s has not answered since a call failed %v ago (%v); calls to it fail at once until it answers a probe (every %v)",
		b.down, b.endpoint, time.Since(b.since).Round(time.Millisecond), b.cause, b.every)
}

// named is err of a call to the service, named: prefixed with the
// service's name unless check made it (it names the service already).
func (b *breaker) named(err error) error {
	if errors.Is(err, b.down) {
		return err
	}
	return fmt.Errorf("%s: %w", b.name, err)
}

// call is one call through a breaker: its context, bounded by the
// timeout, and when it started.
type call struct {
	b      *breaker
	op     string
	ctx    context.Context
	cancel context.CancelFunc
	start  time.Time
}

// begin starts a call, bounded by the timeout unless unbounded (a listing
// of many pages), or returns check's error. op names the call in the log
// if the call opens the circuit ("": its error names it).
func (b *breaker) begin(ctx context.Context, op string, unbounded bool) (*call, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	c := &call{b: b, op: op, start: time.Now()}
	if unbounded {
		c.ctx, c.cancel = context.WithCancel(ctx)
	} else {
		c.ctx, c.cancel = context.WithTimeoutCause(ctx, b.timeout, errNoAnswer)
	}
	return c, nil
}

// end notes the call's outcome, releases its context and returns err.
func (c *call) end(err error) error {
	if unanswered(c.ctx, err) {
		cause := err
		if c.op != "" {
			cause = fmt.Errorf("%s: %w", c.op, err)
		}
		c.b.failed(c.start, cause)
	}
	c.cancel()
	return err
}

// do runs fn as one call.
func (b *breaker) do(ctx context.Context, op string, fn func(context.Context) error) error {
	c, err := b.begin(ctx, op, false)
	if err != nil {
		return err
	}
	return c.end(fn(c.ctx))
}

// unanswered reports whether err, of a call made with ctx, says that the
// service did not answer: an OpTimeout ran out, or the connection failed
// (refused, reset, no route). An answer, even an error (a missing object,
// a failed comparison), is not; nor is the caller's cancellation.
func unanswered(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(context.Cause(ctx), errNoAnswer) {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	var ne *net.OpError
	return errors.As(err, &ne) || status.Code(err) == codes.Unavailable
}

// failed opens the circuit, unless it is open or closed after the failed
// call started, and starts the prober.
func (b *breaker) failed(start time.Time, err error) {
	b.mu.Lock()
	if b.open || b.stopped || start.Before(b.closedAt) {
		b.mu.Unlock()
		return
	}
	b.open, b.since, b.cause = true, time.Now(), err
	probe := !b.probing
	b.probing = true
	b.mu.Unlock()
	b.log.Warn("pool: circuit open: "+b.name+" does not answer; calls to it fail at once until it answers again",
		"endpoint", b.endpoint, "err", err, "probe every", b.every)
	if probe {
		go b.probe()
	}
}

// probe asks the service every b.every until it answers, then closes the
// circuit.
func (b *breaker) probe() {
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(b.timeout, 2*b.every))
		err := b.ping(ctx)
		cancel()
		if err != nil {
			continue
		}
		b.mu.Lock()
		b.open, b.probing, b.closedAt = false, false, time.Now()
		since := b.since
		b.mu.Unlock()
		b.log.Warn("pool: circuit closed: "+b.name+" answers again", "endpoint", b.endpoint, "after", time.Since(since).Round(time.Second))
		return
	}
}

// close stops the prober; failures after it open nothing.
func (b *breaker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		b.stopped = true
		close(b.stop)
	}
}

// guardedObjects makes every call to an object store through a breaker.
type guardedObjects struct {
	objs Objects
	b    *breaker
}

var _ Objects = guardedObjects{}

func (g guardedObjects) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return g.b.do(ctx, "", func(ctx context.Context) error { return g.objs.Put(ctx, name, r, size) })
}

func (g guardedObjects) ReadRange(ctx context.Context, name string, off, n int64) (b []byte, err error) {
	err = g.b.do(ctx, "", func(ctx context.Context) error {
		b, err = g.objs.ReadRange(ctx, name, off, n)
		return err
	})
	return b, err
}

func (g guardedObjects) Stat(ctx context.Context, name string) (oi ObjectInfo, err error) {
	err = g.b.do(ctx, "", func(ctx context.Context) error {
		oi, err = g.objs.Stat(ctx, name)
		return err
	})
	return oi, err
}

func (g guardedObjects) Delete(ctx context.Context, name string) error {
	return g.b.do(ctx, "", func(ctx context.Context) error { return g.objs.Delete(ctx, name) })
}

// List is not bounded by the timeout: a listing is many calls.
func (g guardedObjects) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	c, err := g.b.begin(ctx, "", true)
	if err != nil {
		return err
	}
	return c.end(g.objs.List(c.ctx, prefix, fn))
}

// guardedKV makes every call to etcd's key-value API through a breaker,
// as clientv3's namespace.NewKV wraps Client.KV. Leases and watches are
// not: a session's keepalives and a watch's stream run on.
type guardedKV struct {
	clientv3.KV
	b *breaker
}

func (k guardedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (resp *clientv3.PutResponse, err error) {
	err = k.b.do(ctx, "put "+key, func(ctx context.Context) error {
		resp, err = k.KV.Put(ctx, key, val, opts...)
		return err
	})
	return resp, err
}

func (k guardedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.GetResponse, err error) {
	err = k.b.do(ctx, "get "+key, func(ctx context.Context) error {
		resp, err = k.KV.Get(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (k guardedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.DeleteResponse, err error) {
	err = k.b.do(ctx, "delete "+key, func(ctx context.Context) error {
		resp, err = k.KV.Delete(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (k guardedKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (resp *clientv3.CompactResponse, err error) {
	err = k.b.do(ctx, "compact", func(ctx context.Context) error {
		resp, err = k.KV.Compact(ctx, rev, opts...)
		return err
	})
	return resp, err
}

func (k guardedKV) Do(ctx context.Context, op clientv3.Op) (resp clientv3.OpResponse, err error) {
	err = k.b.do(ctx, "do "+string(op.KeyBytes()), func(ctx context.Context) error {
		resp, err = k.KV.Do(ctx, op)
		return err
	})
	return resp, err
}

// Txn begins the call when the transaction is made (clientv3 binds the
// context then) and ends it at Commit, which fails at once if the
// circuit is open by then.
func (k guardedKV) Txn(ctx context.Context) clientv3.Txn {
	c, err := k.b.begin(ctx, "txn", false)
	if err != nil {
		return &guardedTxn{Txn: k.KV.Txn(ctx), err: err}
	}
	return &guardedTxn{Txn: k.KV.Txn(c.ctx), c: c}
}

type guardedTxn struct {
	clientv3.Txn
	c   *call // nil: the circuit was open at Txn
	err error
}

func (t *guardedTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *guardedTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *guardedTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *guardedTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.c == nil {
		return nil, t.err
	}
	if err := t.c.b.check(); err != nil {
		t.c.cancel()
		return nil, err
	}
	resp, err := t.Txn.Commit()
	return resp, t.c.end(err)
}
