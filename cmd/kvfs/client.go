package main

import (
	"context"
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
// the store itself otherwise.
func connect(dir string) (storeClient, error) {
	sock := filepath.Join(dir, socketName)
	if _, err := os.Stat(sock); err == nil {
		c := newSocketClient(sock)
		if c.ping() == nil {
			return c, nil
		}
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		return nil, err
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

// unixTransport dials the control socket whatever the URL's host.
func unixTransport(sock string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		IdleConnTimeout: 10 * time.Second,
	}
}
