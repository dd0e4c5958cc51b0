package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuf is a bytes.Buffer safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestStopOnSignalBusy: SIGINT of a foreground mount with a file open
// says what it waits for (it waited without a word); a second SIGINT
// detaches the mount lazily, saying so; the daemon then exits (0) once
// the open files are closed.
func TestStopOnSignalBusy(t *testing.T) {
	var out syncBuf
	var mu sync.Mutex
	tries, detaches := 0, 0
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	sys := stopSys{
		unmount: func() error { mu.Lock(); defer mu.Unlock(); tries++; return syscall.EBUSY },
		detach:  func() error { mu.Lock(); defer mu.Unlock(); detaches++; return nil },
		holders: func() []mountHolder {
			return []mountHolder{{PID: 42, Comm: "engine", How: "has open", Path: "/m/snap.mlxkv"}}
		},
		say:      &out,
		poll:     time.Millisecond,
		termWait: time.Hour,
	}
	ret := make(chan error, 1)
	go func() {
		ret <- stopOnSignal("linux", "/m", sigs, done, sys, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	sigs <- os.Interrupt
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for i := 0; !ok(); i++ {
			if i == 500 {
				t.Fatalf("%s; said:\n%s", what, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("no word of the busy mount", func() bool { return strings.Contains(out.String(), "/m is busy") })
	for _, want := range []string{"PID 42 (engine) has /m/snap.mlxkv open", "waiting for them to be closed", "Ctrl-C again (SIGINT) detaches it now"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the busy message lacks %q: %s", want, out.String())
		}
	}
	mu.Lock()
	if detaches != 0 {
		t.Error("detached before a second signal")
	}
	mu.Unlock()
	sigs <- os.Interrupt
	waitFor("no detach at the second SIGINT", func() bool { return strings.Contains(out.String(), "detached /m") })
	mu.Lock()
	if detaches != 1 {
		t.Errorf("%d detaches", detaches)
	}
	n := tries
	mu.Unlock()
	if !strings.Contains(out.String(), "serving its open files until they are closed") {
		t.Errorf("the detach message: %s", out.String())
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	if tries > n+1 {
		t.Errorf("unmount still tried after the detach (%d, then %d)", n, tries)
	}
	mu.Unlock()
	close(done)
	select {
	case err := <-ret:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not return once the mount was gone")
	}
}

// TestStopOnSignalTerm: after SIGTERM a busy mount is detached by itself
// after termWait (a service manager sends one SIGTERM).
func TestStopOnSignalTerm(t *testing.T) {
	var out syncBuf
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	detached := make(chan struct{})
	sys := stopSys{
		unmount:  func() error { return syscall.EBUSY },
		detach:   func() error { close(detached); return nil },
		holders:  func() []mountHolder { return nil },
		say:      &out,
		poll:     time.Millisecond,
		termWait: 50 * time.Millisecond,
	}
	go stopOnSignal("linux", "/m", sigs, done, sys, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sigs <- syscall.SIGTERM
	select {
	case <-detached:
	case <-time.After(5 * time.Second):
		t.Fatalf("not detached after SIGTERM; said:\n%s", out.String())
	}
	close(done)
	if !strings.Contains(out.String(), "waiting up to 50ms") {
		t.Errorf("said: %s", out.String())
	}
}
