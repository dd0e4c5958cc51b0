package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/internal/fdlimit"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
)

// The control socket (STORE/kvfs.sock) is HTTP over a unix socket, served
// by the daemon while it holds the store:
//
//	GET    /v1/ping
//	GET    /v1/stats
//	GET    /v1/stat?path=P          one entry
//	GET    /v1/list?path=P          a directory's entries
//	PUT    /v1/file?path=P          body: the content to store as P
//	GET    /v1/file?path=P[&verify=1]
//	DELETE /v1/file?path=P
//	POST   /v1/rename?from=A&to=B
//	POST   /v1/match                body and reply: JSON (match.go)
//
// Errors come back as a status and {"error": message, "kind": sentinel},
// so that the client returns the same errors (and exit codes) as the store.
// Paths in query strings are percent-encoded bytes, so any name travels;
// entries in replies carry names that are not UTF-8 as bytes too (wireInfo).

// changeNotifier learns of names changed behind the kernel's back.
type changeNotifier interface{ Invalidate(path string) }

// controlServer serves the socket.
type controlServer struct {
	s      *store.Store
	notify changeNotifier
	log    *slog.Logger
	srv    *http.Server
	ln     net.Listener
	// fds logs running out of descriptors (in accept or a handler) once
	// per kind, with the limit.
	fds *fdlimit.Reporter
}

// Server-side timeouts. None bounds a whole request: a get streams a large
// file for as long as the client reads it, a put ingests for as long as
// the file takes. What is bounded is silence: a request whose headers do
// not arrive, a body or a reader that stops moving, an idle connection.
const (
	ctlHeaderTimeout = 10 * time.Second
	ctlIdleTimeout   = time.Minute
	// ctlStallTimeout is how long one read of a request body or one write
	// of a reply may wait for the peer.
	ctlStallTimeout = time.Minute
	// ctlProcessingEvery is how often a long request tells the client it
	// is still being worked on ("102 Processing"), well inside the
	// client's idle timeout.
	ctlProcessingEvery = 5 * time.Second
)

func startControl(s *store.Store, notify changeNotifier, log *slog.Logger) (*controlServer, error) {
	sock := filepath.Join(s.Dir(), socketName)
	ln, err := listenPrivate(sock)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", sock, err)
	}
	c := &controlServer{s: s, notify: notify, log: log, fds: fdlimit.NewReporter(log, "control socket "+sock)}
	c.ln = &patientListener{Listener: ln, fds: c.fds, slots: make(chan struct{}, ctlMaxConns())}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /v1/stats", c.slow(func(r *http.Request) (any, error) { return s.Stats() }))
	mux.HandleFunc("GET /v1/stat", c.slow(func(r *http.Request) (any, error) {
		fi, err := s.Stat(r.URL.Query().Get("path"))
		return toWire(fi), err
	}))
	mux.HandleFunc("GET /v1/list", c.slow(func(r *http.Request) (any, error) {
		ents, err := s.List(r.URL.Query().Get("path"))
		out := make([]*wireInfo, len(ents))
		for i, e := range ents {
			out[i] = toWire(e)
		}
		return out, err
	}))
	registerRetention(mux, c) // cmd_retain.go
	mux.HandleFunc("PUT /v1/file", c.put)
	mux.HandleFunc("GET /v1/file", c.get)
	mux.HandleFunc("DELETE /v1/file", c.slow(func(r *http.Request) (any, error) {
		p := r.URL.Query().Get("path")
		err := s.Remove(p)
		if err == nil {
			c.notify.Invalidate(p)
		}
		return struct{}{}, err
	}))
	mux.HandleFunc("POST /v1/gc", c.slow(compactRequest(s))) // gc.go
	mux.HandleFunc("POST /v1/fsck", fsckRequest(s))          // fsck_socket.go
	mux.HandleFunc("POST /v1/match", c.match)                // match.go
	mux.HandleFunc("POST /v1/rename", c.slow(func(r *http.Request) (any, error) {
		q := r.URL.Query()
		err := s.Rename(q.Get("from"), q.Get("to"))
		if err == nil {
			c.notify.Invalidate(q.Get("from"))
			c.notify.Invalidate(q.Get("to"))
		}
		return struct{}{}, err
	}))
	c.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: ctlHeaderTimeout,
		ConnContext:       peerContext, // match.go
		IdleTimeout:       ctlIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go c.srv.Serve(c.ln)
	return c, nil
}

// listenPrivate listens on the unix socket sock so that it never exists
// there with a mode other than 0600. Binding at sock and chmodding after
// would leave it, between the two, with the mode the umask gives (0777
// less the umask): another user could connect then. Setting the umask
// instead is no cure in a daemon: it is the process's, and goroutines
// creating files meanwhile would get it too. So the socket is bound in a
// fresh directory of its own (0700, next to sock: a rename does not cross
// filesystems), made 0600 there, and renamed to sock, which replaces a
// socket left by a daemon that died (the caller holds the store lock).
// The private directory's name adds at most 7 bytes to the bound path
// (sun_path: 108 bytes on Linux, 104 on macOS). Directories left by a
// daemon killed between the two steps are removed first.
func listenPrivate(sock string) (*net.UnixListener, error) {
	parent := filepath.Dir(sock)
	stale, _ := filepath.Glob(filepath.Join(parent, ctlPrivatePrefix+"*"))
	for _, d := range stale {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			os.RemoveAll(d)
		}
	}
	tmp, cleanup, err := privateSocketPath(parent)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if n := max(len(tmp), len(sock)); n > maxSocketPath {
		// bind says only "invalid argument".
		return nil, fmt.Errorf("the socket's path (bound as %s) is %d bytes, over the %d a Unix socket's path may have: use a store whose path is %d bytes shorter", tmp, n, maxSocketPath, n-maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The listener would remove tmp when closed; it moves to sock, which
	// controlServer.close removes.
	ln.SetUnlinkOnClose(false)
	if testHookBound != nil {
		testHookBound(tmp)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(tmp, sock); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// privateSocketPath returns a path to bind the control socket at where no
// other user can reach it: in a fresh 0700 directory in parent, or, on a
// full disk, where a new directory needs a block that an entry in an
// existing one does not, in the store's spool directory (0700 and the
// store owner's since kvfs init; checked here). Mounting must work on a
// full disk: deleting files is how it stops being one.
func privateSocketPath(parent string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp(parent, ctlPrivatePrefix)
	if err == nil {
		cleanup = func() { os.RemoveAll(dir) }
		if err := os.Chmod(dir, 0o700); err != nil { // MkdirTemp's 0700 less a umask like 0200 could deny the bind
			cleanup()
			return "", nil, err
		}
		return filepath.Join(dir, "s"), cleanup, nil
	}
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return "", nil, err
	}
	spool := filepath.Join(parent, "spool")
	fi, serr := os.Lstat(spool)
	if serr != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return "", nil, fmt.Errorf("%w (and %s is no private directory to bind in instead)", err, spool)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return "", nil, fmt.Errorf("%w (and %s is not this user's, to bind in instead)", err, spool)
	}
	path = filepath.Join(spool, fmt.Sprintf("%s-%d", ctlPrivatePrefix, os.Getpid()))
	os.Remove(path) // a daemon of the same PID before a reboot
	return path, func() { os.Remove(path) }, nil
}

// maxSocketPath is the longest path a Unix socket may be bound or
// reached at: sun_path holds 108 bytes on Linux (104 on macOS), with its
// terminating NUL.
var maxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// ctlPrivatePrefix starts the names of the private directories the
// control socket is bound in (listenPrivate).
const ctlPrivatePrefix = ".sock"

// testHookBound, when set (by tests), is called with the path the
// control socket was bound at, right after the bind.
var testHookBound func(path string)

// close stops serving and removes the socket.
func (c *controlServer) close() {
	c.srv.Close()
	os.Remove(filepath.Join(c.s.Dir(), socketName))
}

// ctlMaxConns bounds the control connections open at once. Each is a
// descriptor of the daemon, which the mount needs too: a crowd of idle or
// slow clients must not starve it. Connections past the bound wait in the
// socket's backlog, costing the daemon nothing, until one closes. The
// bound is an eighth of the descriptor limit, at least 16 and at most 1024.
func ctlMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 64
	}
	return int(min(max(lim.Cur/8, 16), 1024))
}

// patientListener bounds the open connections (slots) and keeps accepting
// through a shortage of descriptors. While the daemon is out of them
// accept4 fails with EMFILE at once, again and again, and the connection
// waits in the backlog; http.Server would retry and log every time. It
// backs off instead (5 ms doubling to 1 s), logs the first failure of each
// kind with the limit, and only returns other errors.
type patientListener struct {
	net.Listener
	fds   *fdlimit.Reporter
	slots chan struct{}
}

// slotConn gives its slot back when it is closed.
type slotConn struct {
	net.Conn
	once  sync.Once
	slots chan struct{}
}

func (c *slotConn) Close() error {
	c.once.Do(func() { <-c.slots })
	return c.Conn.Close()
}

func (l *patientListener) Accept() (net.Conn, error) {
	if l.slots == nil {
		return l.accept()
	}
	l.slots <- struct{}{}
	conn, err := l.accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: conn, slots: l.slots}, nil
}

func (l *patientListener) accept() (net.Conn, error) {
	var delay time.Duration
	for {
		conn, err := l.Listener.Accept()
		if err == nil || !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
			return conn, err
		}
		l.fds.Note(err)
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		time.Sleep(delay)
	}
}

// slow serves a request that may take a while (an index scan, a remove that
// releases a large file): while fn runs the client gets "102 Processing"
// every ctlProcessingEvery, so that its idle timeout tells a daemon at
// work from a stuck one.
func (c *controlServer) slow(fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return c.slowEvery(fn, ctlProcessingEvery)
}

// slowEvery is slow, saying "102 Processing" every every.
func (c *controlServer) slowEvery(fn func(r *http.Request) (any, error), every time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		stop := c.processing(w, every)
		v, err := fn(r)
		stop()
		c.reply(w, v, err)
	}
}

// processing sends "102 Processing" every every until stop is called;
// stop returns once no more will be sent.
func (c *controlServer) processing(w http.ResponseWriter, every time.Duration) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	rc := http.NewResponseController(w)
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				rc.SetWriteDeadline(time.Now().Add(ctlStallTimeout))
				w.WriteHeader(http.StatusProcessing)
			}
		}
	}()
	return func() { close(done); <-exited }
}

// put spools the request body and ingests it. Nothing is named before the
// ingest commits, in one transaction: a put that fails leaves no name.
func (c *controlServer) put(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	f, err := os.CreateTemp(filepath.Join(c.s.Dir(), "spool"), "put-")
	if err != nil {
		c.reply(w, nil, fmt.Errorf("put %s: spool: %w", p, err))
		return
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	rc := http.NewResponseController(w)
	n, err := io.Copy(f, &stallReader{r: r.Body, rc: rc})
	if err != nil {
		c.reply(w, nil, fmt.Errorf("receive %s: %w", p, err))
		return
	}
	// No deadline while ingesting: the server's background read of the
	// connection would take one that ran out for a client gone, and
	// cancel the request.
	rc.SetReadDeadline(time.Time{})
	stop := c.processing(w, ctlProcessingEvery)
	fi, st, err := c.s.Put(r.Context(), f, n, p, store.PutOptions{})
	stop()
	if err == nil {
		c.notify.Invalidate(p)
	}
	c.reply(w, putReply{toWire(fi), st}, err)
}

// stallReader reads a request body, failing a read that waits on the
// client for more than ctlStallTimeout.
type stallReader struct {
	r  io.Reader
	rc *http.ResponseController
}

func (s *stallReader) Read(p []byte) (int, error) {
	s.rc.SetReadDeadline(time.Now().Add(ctlStallTimeout))
	return s.r.Read(p)
}

// stallWriter writes a reply, failing a write that waits on the client
// (one that stopped reading) for more than ctlStallTimeout.
type stallWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (s *stallWriter) Write(p []byte) (int, error) {
	s.rc.SetWriteDeadline(time.Now().Add(ctlStallTimeout))
	return s.w.Write(p)
}

type putReply struct {
	Info  *wireInfo
	Stats *store.PutStats
}

// get streams a file. An error after the status is sent (a corrupt chunk
// under verification) travels in the trailer, so the client fails instead
// of keeping a short file.
func (c *controlServer) get(w http.ResponseWriter, r *http.Request) {
	f, err := c.s.Open(r.URL.Query().Get("path"))
	if err != nil {
		c.reply(w, nil, err)
		return
	}
	defer f.Close()
	f.SetVerify(r.URL.Query().Get("verify") == "1")
	w.Header().Set("Trailer", "Kvfs-Error, Kvfs-Error-Kind")
	w.Header().Set("Kvfs-Size", strconv.FormatInt(f.Size(), 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	sw := &stallWriter{w: w, rc: http.NewResponseController(w)}
	if _, err := io.Copy(sw, io.NewSectionReader(f, 0, f.Size())); err != nil {
		c.log.Warn("control: get", "err", err)
		w.Header().Set("Kvfs-Error", escapeInvalid(err.Error()))
		w.Header().Set("Kvfs-Error-Kind", kindOf(err))
	}
}

func kindOf(err error) string {
	for _, k := range errKinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return ""
}

// errKinds name the sentinel errors that cross the socket.
var errKinds = []struct {
	kind string
	err  error
	code int
}{
	{"notexist", iofs.ErrNotExist, http.StatusNotFound},
	{"exist", iofs.ErrExist, http.StatusConflict},
	{"notdir", manifest.ErrNotDir, http.StatusConflict},
	{"isdir", manifest.ErrIsDir, http.StatusConflict},
	{"notempty", manifest.ErrNotEmpty, http.StatusConflict},
	{"nametoolong", store.ErrNameTooLong, http.StatusBadRequest},
	{"invalid", iofs.ErrInvalid, http.StatusBadRequest},
	{"corrupt", blockstore.ErrCorrupt, http.StatusInternalServerError},
	{"blobmismatch", store.ErrBlobMismatch, http.StatusBadRequest},
}

type errorReply struct {
	Error string `json:"error"`
	Kind  string `json:"kind,omitempty"`
}

func (c *controlServer) reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		c.fds.Note(err)
		e := errorReply{Error: escapeInvalid(err.Error())}
		code := http.StatusInternalServerError
		e.Kind = kindOf(err)
		for _, k := range errKinds {
			if k.kind == e.Kind {
				code = k.code
			}
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(e)
		return
	}
	json.NewEncoder(w).Encode(v)
}

// socketClient is a storeClient through the daemon.
type socketClient struct {
	sock string
	to   socketTimeouts
	http *http.Client
}

func newSocketClient(sock string, to socketTimeouts) *socketClient {
	return &socketClient{sock: sock, to: to, http: &http.Client{Transport: unixTransport(sock, to)}}
}

// sockErr names the socket in an error of the connection, and says what a
// timeout means.
func (c *socketClient) sockErr(err error) error {
	if isTimeout(err) {
		return fmt.Errorf("control socket %s: the daemon did not answer for %v (stuck, or out of file descriptors: see its log): %w", c.sock, c.to.Idle, err)
	}
	return fmt.Errorf("control socket %s: %w", c.sock, err)
}

// remoteError is an error from the daemon, wrapping the store's sentinel
// where there is one.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

func (c *socketClient) do(method, path string, q url.Values, body io.Reader, out any) (*http.Response, error) {
	return c.doCtx(context.Background(), method, path, q, body, out)
}

// doCtx is do until ctx is done: then the connection is closed, which
// cancels the request in the daemon too (its request context ends when
// the client goes), so that Ctrl-C stops a put that the daemon is
// storing, not only the upload.
func (c *socketClient) doCtx(ctx context.Context, method, path string, q url.Values, body io.Reader, out any) (*http.Response, error) {
	// The daemon sends "102 Processing" while it works on a long request;
	// seeing them (rather than letting the transport count them against
	// its header limit) is all the client does with them.
	trace := &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { return nil }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace),
		method, "http://kvfs"+path+"?"+q.Encode(), body)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.sockErr(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var e errorReply
		if json.NewDecoder(resp.Body).Decode(&e) != nil {
			return nil, fmt.Errorf("control socket %s: %s", c.sock, resp.Status)
		}
		re := &remoteError{msg: e.Error}
		for _, k := range errKinds {
			if k.kind == e.Kind {
				re.err = k.err
			}
		}
		return nil, re
	}
	if out == nil {
		return resp, nil
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, c.sockErr(err)
	}
	return resp, nil
}

func (c *socketClient) ping() error {
	resp, err := c.do("GET", "/v1/ping", nil, nil, nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func (c *socketClient) Stat(path string) (*store.FileInfo, error) {
	fi := wireInfo{FileInfo: &store.FileInfo{}}
	_, err := c.do("GET", "/v1/stat", url.Values{"path": {path}}, nil, &fi)
	return fi.info(), err
}

func (c *socketClient) List(path string) ([]*store.FileInfo, error) {
	var ents []*wireInfo
	_, err := c.do("GET", "/v1/list", url.Values{"path": {path}}, nil, &ents)
	out := make([]*store.FileInfo, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.info())
	}
	return out, err
}

func (c *socketClient) Stats() (*store.Stats, error) {
	var st store.Stats
	_, err := c.do("GET", "/v1/stats", nil, nil, &st)
	return &st, err
}

func (c *socketClient) Put(ctx context.Context, src, path string, progress func(done, total int64)) (*store.FileInfo, *store.PutStats, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, &os.PathError{Op: "put", Path: src, Err: errors.New("not a regular file")}
	}
	var body io.Reader = f
	if progress != nil {
		pr := &progressReader{r: f, total: fi.Size(), progress: progress}
		body = pr
		// Once the upload is done the daemon stores the file (seconds for
		// a large one): the bar says so, and for how long, instead of
		// sitting at 100%.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if pr.done.Load() >= pr.total {
						progress(pr.total, pr.total)
					}
				}
			}
		}()
	}
	var out putReply
	_, err = c.doCtx(ctx, "PUT", "/v1/file", url.Values{"path": {path}}, body, &out)
	return out.Info.info(), out.Stats, err
}

func (c *socketClient) Get(path string, verify bool) (io.ReadCloser, int64, error) {
	q := url.Values{"path": {path}}
	if verify {
		q.Set("verify", "1")
	}
	resp, err := c.do("GET", "/v1/file", q, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	size, _ := strconv.ParseInt(resp.Header.Get("Kvfs-Size"), 10, 64)
	return &trailerReader{resp: resp, c: c}, size, nil
}

// trailerReader ends a download with the error the daemon put in the
// trailer, if any.
type trailerReader struct {
	resp *http.Response
	c    *socketClient
}

func (t *trailerReader) Read(p []byte) (int, error) {
	n, err := t.resp.Body.Read(p)
	if err != nil && err != io.EOF {
		return n, t.c.sockErr(err)
	}
	if err == io.EOF {
		if msg := t.resp.Trailer.Get("Kvfs-Error"); msg != "" {
			re := &remoteError{msg: msg}
			for _, k := range errKinds {
				if k.kind == t.resp.Trailer.Get("Kvfs-Error-Kind") {
					re.err = k.err
				}
			}
			return n, re
		}
	}
	return n, err
}

func (t *trailerReader) Close() error { return t.resp.Body.Close() }

func (c *socketClient) Remove(path string) error {
	_, err := c.do("DELETE", "/v1/file", url.Values{"path": {path}}, nil, &struct{}{})
	return err
}

func (c *socketClient) Rename(oldpath, newpath string) error {
	_, err := c.do("POST", "/v1/rename", url.Values{"from": {oldpath}, "to": {newpath}}, nil, &struct{}{})
	return err
}

func (c *socketClient) Close() error { c.http.CloseIdleConnections(); return nil }

// progressReader reports how much of a body has been sent.
type progressReader struct {
	r        io.Reader
	done     atomic.Int64 // read by Put's ticker
	total    int64
	progress func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	done := p.done.Add(int64(n))
	p.progress(done, p.total)
	return n, err
}
