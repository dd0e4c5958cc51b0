package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/store"
)

// fsckEvent is one line of the answer to POST /v1/fsck: newline-separated
// JSON objects, progress (and a heartbeat while nothing is verified) until
// the last, which has Final set with the report and the exit status. A
// streamed answer lets the CLI draw its progress bar for a --verify of a
// mounted store as it does offline.
type fsckEvent struct {
	Done   int64  `json:"done,omitempty"`
	Total  int64  `json:"total,omitempty"`
	Final  bool   `json:"final,omitempty"`
	Code   int    `json:"code,omitempty"`
	Report string `json:"report,omitempty"`
	Error  string `json:"error,omitempty"`
}

// fsckHeartbeat is how often the daemon writes an event while it checks
// without progress to tell, well inside the client's idle timeout.
const fsckHeartbeat = 5 * time.Second

// fsckRequest serves POST /v1/fsck: a live check by the daemon
// (gc.FsckLive); verify=1 reads every chunk, repair=1 is refused there.
func fsckRequest(s *store.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		opts := gc.FsckOptions{Verify: q.Get("verify") == "1", Repair: q.Get("repair") == "1"}
		w.Header().Set("Content-Type", "application/x-ndjson")
		rc := http.NewResponseController(w)
		var mu sync.Mutex
		enc := json.NewEncoder(w)
		send := func(ev fsckEvent) {
			mu.Lock()
			defer mu.Unlock()
			rc.SetWriteDeadline(time.Now().Add(ctlStallTimeout))
			enc.Encode(ev)
			rc.Flush()
		}
		var last time.Time
		opts.Progress = func(done, total int64) {
			mu.Lock()
			now := time.Now()
			skip := now.Sub(last) < 100*time.Millisecond && done < total
			if !skip {
				last = now
			}
			mu.Unlock()
			if !skip {
				send(fsckEvent{Done: done, Total: total})
			}
		}
		stop := make(chan struct{})
		beats := make(chan struct{})
		go func() {
			defer close(beats)
			t := time.NewTicker(fsckHeartbeat)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					send(fsckEvent{})
				}
			}
		}()
		var report bytes.Buffer
		code, err := gc.FsckLive(r.Context(), s, opts, &report)
		close(stop)
		<-beats
		ev := fsckEvent{Final: true, Code: code, Report: report.String()}
		if err != nil {
			ev.Error = err.Error()
		}
		send(ev)
	}
}

// fsckMounted asks the daemon holding dir, if one answers, to check its
// store; it writes the report to out and returns the exit status, or
// errNotMounted.
func fsckMounted(ctx context.Context, dir string, opts gc.FsckOptions, out io.Writer) (int, error) {
	real, err := store.TrustedDir(dir)
	if err != nil {
		return gc.StatusFailed, fmt.Errorf("fsck %s: %w", dir, err)
	}
	sock := filepath.Join(real, socketName)
	if _, err := os.Stat(sock); err != nil {
		return 0, errNotMounted
	}
	c := newSocketClient(sock, defaultSocketTimeouts())
	defer c.Close()
	if err := c.ping(); err != nil {
		if isTimeout(err) {
			return gc.StatusFailed, err
		}
		return 0, errNotMounted
	}
	q := url.Values{}
	if opts.Verify {
		q.Set("verify", "1")
	}
	if opts.Repair {
		q.Set("repair", "1")
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://kvfs/v1/fsck?"+q.Encode(), nil)
	if err != nil {
		return gc.StatusFailed, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return gc.StatusFailed, fmt.Errorf("fsck %s: %w", dir, c.sockErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return gc.StatusFailed, fmt.Errorf("fsck %s through %s: %s", dir, sock, resp.Status)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev fsckEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return gc.StatusFailed, ctx.Err()
			}
			return gc.StatusFailed, fmt.Errorf("fsck %s through %s: the answer ended early: %w", dir, sock, err)
		}
		if !ev.Final {
			if ev.Total > 0 && opts.Progress != nil {
				opts.Progress(ev.Done, ev.Total)
			}
			continue
		}
		io.WriteString(out, ev.Report)
		if ev.Error != "" {
			return ev.Code, fmt.Errorf("%s", ev.Error)
		}
		return ev.Code, nil
	}
}
