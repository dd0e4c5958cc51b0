package main

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/fdlimit"
)

// shortTimeouts keep the tests short; what they prove does not depend on
// the values.
var shortTimeouts = socketTimeouts{Dial: time.Second, Idle: 300 * time.Millisecond}

// listenUnix listens on a fresh socket (as a stuck daemon's), closed at
// the end of the test.
func listenUnix(t *testing.T) (dir, sock string, ln net.Listener) {
	t.Helper()
	dir = t.TempDir()
	sock = filepath.Join(dir, socketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return dir, sock, ln
}

// within runs fn and fails the test if it does not return in a minute:
// a hang is the failure this file tests for.
func within(t *testing.T, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the client hangs")
		return nil
	}
}

// wantStuck checks the error of a request to a daemon that does not answer.
func wantStuck(t *testing.T, err error, sock string) {
	t.Helper()
	if err == nil {
		t.Fatal("request to a daemon that never answers succeeded")
	}
	if !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("error does not name the socket and say what happened: %v", err)
	}
}

// TestSocketClientSilentServer: a daemon that accepts and reads the
// request but never answers (kvfs stats hung forever on one).
func TestSocketClientSilentServer(t *testing.T) {
	_, sock, ln := listenUnix(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }() // reads, never writes
		}
	}()
	c := newSocketClient(sock, shortTimeouts)
	wantStuck(t, within(t, func() error { _, err := c.Stats(); return err }), sock)
	wantStuck(t, within(t, func() error { _, _, err := c.Get("f", false); return err }), sock)
}

// TestSocketClientNoAccept: a daemon out of descriptors cannot accept; the
// connection waits in the backlog, which the client cannot tell from an
// accepted one.
func TestSocketClientNoAccept(t *testing.T) {
	dir, sock, _ := listenUnix(t)
	c := newSocketClient(sock, shortTimeouts)
	wantStuck(t, within(t, func() error { return c.Remove("f") }), sock)
	// connect must not take a stuck daemon for no daemon and open the
	// store (which the daemon holds): here there is no store at all, so
	// falling back would fail differently.
	err := within(t, func() error { _, err := connectWith(dir, shortTimeouts); return err })
	wantStuck(t, err, sock)
}

// TestSocketProcessingKeepsAlive: a request that the daemon works on for
// longer than the client's idle timeout succeeds, because the daemon says
// "102 Processing" meanwhile; without them the same request times out.
func TestSocketProcessingKeepsAlive(t *testing.T) {
	_, sock, ln := listenUnix(t)
	c := &controlServer{log: slog.New(slog.DiscardHandler)}
	c.fds = fdlimit.NewReporter(c.log, "test")
	work := func(r *http.Request) (any, error) {
		time.Sleep(4 * shortTimeouts.Idle)
		return map[string]string{"done": "yes"}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/slow", c.slowEvery(work, shortTimeouts.Idle/3))
	mux.HandleFunc("GET /v1/silent", func(w http.ResponseWriter, r *http.Request) {
		v, err := work(r)
		c.reply(w, v, err)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	cl := newSocketClient(sock, shortTimeouts)
	var out map[string]string
	if _, err := cl.do("GET", "/v1/slow", nil, nil, &out); err != nil || out["done"] != "yes" {
		t.Fatalf("slow request with 102s: %v %v", out, err)
	}
	err := within(t, func() error { _, err := cl.do("GET", "/v1/silent", nil, nil, &out); return err })
	wantStuck(t, err, sock)
}

// fakeListener fails Accept with EMFILE a number of times, then returns a
// connection.
type fakeListener struct {
	net.Listener
	fails int
	conn  net.Conn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: syscall.EMFILE}
	}
	return l.conn, nil
}

// TestPatientListener: EMFILE from accept is waited out, not returned (so
// http.Server does not log every retry), and logged once with the limit.
func TestPatientListener(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	l := &patientListener{Listener: &fakeListener{fails: 5, conn: a}, fds: fdlimit.NewReporter(log, "control socket")}
	got, err := l.Accept()
	if err != nil || got != a {
		t.Fatalf("Accept: %v, %v", got, err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), "nofile_soft=") {
		t.Fatalf("want the shortage logged once with the limit, got:\n%s", buf.String())
	}
}

// TestControlConnectionBound: connections past the bound wait in the
// socket's backlog, holding no descriptor of the daemon, until one closes;
// idle clients cannot starve the mount of descriptors.
func TestControlConnectionBound(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := &patientListener{Listener: ln, fds: fdlimit.NewReporter(slog.New(slog.DiscardHandler), "control socket"), slots: make(chan struct{}, 2)}
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted past a bound of 2")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted after one closed")
	}
}
