package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfs/kvfs/store"
)

// storeClient is what the store commands need: implemented by the store
// itself when no daemon holds it, and by the daemon's control socket when
// one does, so that the commands behave the same either way.
type storeClient interface {
	Stat(path string) (*store.FileInfo, error)
	List(path string) ([]*store.FileInfo, error)
	Stats() (*store.Stats, error)
	// Put stores the local file src as path.
	Put(ctx context.Context, src, path string, progress func(done, total int64)) (*store.FileInfo, *store.PutStats, error)
	// Get returns the content of path and its size; the caller closes it.
	Get(path string, verify bool) (io.ReadCloser, int64, error)
	Remove(path string) error
	Rename(oldpath, newpath string) error
	Close() error
}

// socketName is the control socket in a store directory.
const socketName = "kvfs.sock"

// connect talks to the daemon that holds dir, if there is one, and opens
// the store itself otherwise. A socket that takes the connection but does
// not answer in time is a daemon that is stuck (out of descriptors, it
// cannot take the connection off the backlog): that is an error naming
// the socket, not a reason to try the store, which the daemon holds.
func connect(dir string) (storeClient, error) { return connectWith(dir, defaultSocketTimeouts()) }

// connectWith is connect with the socket's timeouts.
func connectWith(dir string, to socketTimeouts) (storeClient, error) {
	// Another user's store is not ours to open, nor its socket ours to
	// trust: it could lead to any socket (store/trust.go).
	real, err := store.TrustedDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	dir = real
	sock := filepath.Join(dir, socketName)
	if _, err := os.Stat(sock); err == nil {
		c := newSocketClient(sock, to)
		err := c.ping()
		if err == nil {
			return c, nil
		}
		if isTimeout(err) {
			return nil, err
		}
	}
	if err := notAStore(dir); err != nil {
		return nil, err
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		return nil, inUseBy(dir, err)
	}
	return localClient{s}, nil
}

// localClient is a store opened by this process.
type localClient struct{ *store.Store }

func (l localClient) Put(ctx context.Context, src, path string, progress func(done, total int64)) (*store.FileInfo, *store.PutStats, error) {
	return l.PutFile(ctx, src, path, store.PutOptions{Progress: progress})
}

func (l localClient) Get(path string, verify bool) (io.ReadCloser, int64, error) {
	f, err := l.Open(path)
	if err != nil {
		return nil, 0, err
	}
	f.SetVerify(verify)
	return readCloser{io.NewSectionReader(f, 0, f.Size()), f}, f.Size(), nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// socketTimeouts bound the client's waits on the daemon. There is no
// total timeout: a get of a large file streams for long, and a put waits
// while the daemon ingests, which sends "102 Processing" meanwhile (see
// controlServer.slow). What must not happen is a wait with nothing moving.
type socketTimeouts struct {
	Dial time.Duration // to connect
	Idle time.Duration // with no byte moving either way
}

// defaultSocketTimeouts are the CLI's: the daemon answers every few
// seconds while it works, so half a minute of silence means it is stuck.
func defaultSocketTimeouts() socketTimeouts {
	return socketTimeouts{Dial: 5 * time.Second, Idle: 30 * time.Second}
}

// unixTransport dials the control socket whatever the URL's host. Each
// request has its own connection: a pooled one would carry the idle
// deadline of its last use into the next request.
func unixTransport(sock string, to socketTimeouts) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: to.Dial}
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, err
			}
			return newIdleConn(c, to.Idle), nil
		},
		DisableKeepAlives: true,
	}
}

// idleConn fails a read or write after idle with no progress in either
// direction: bytes going out (a request body being sent) keep a pending
// read waiting for the answer alive, and bytes coming in keep a write.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{Conn: c, idle: idle}
	ic.touch()
	return ic
}

// touch moves both deadlines to idle from now; deadlines apply to pending
// calls too.
func (c *idleConn) touch() { c.Conn.SetDeadline(time.Now().Add(c.idle)) }

func (c *idleConn) Read(p []byte) (int, error) {
	c.touch()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.touch()
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

// isTimeout reports a deadline that ran out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
