package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/store/storetest"
)

// TestControlSocketNeverLoose: the control socket exists at its path
// (STORE/kvfs.sock) only with mode 0600, even under a umask of 0: it is
// bound in a private directory (0700) and renamed into place, replacing
// a socket left by a daemon that died; the private directory is gone
// afterwards (and one left by a crash is removed). An observer polling
// the path while the daemon starts never sees another mode, and neither
// does a check made right after the bind.
func TestControlSocketNeverLoose(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := s.Dir()
	final := filepath.Join(dir, socketName)
	// What a daemon killed mid-start could leave: a socket and a private
	// directory.
	if err := os.WriteFile(final, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, ctlPrivatePrefix+"123"), 0o700); err != nil {
		t.Fatal(err)
	}

	var loose atomic.Value // the first loose mode an observer saw, as a string
	check := func(who string) {
		var st syscall.Stat_t
		if err := syscall.Lstat(final, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK && st.Mode&0o7777 != 0o600 {
			loose.CompareAndSwap(nil, who+": "+os.FileMode(st.Mode&0o7777).String())
		}
	}
	testHookBound = func(bound string) {
		check("right after the bind")
		if filepath.Dir(bound) == dir {
			t.Errorf("bound at %s, in the store directory itself", bound)
		} else if fi, err := os.Stat(filepath.Dir(bound)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("bound in %s: %v, %v; want a private directory (0700)", filepath.Dir(bound), fi.Mode(), err)
		}
	}
	defer func() { testHookBound = nil }()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				check("an observer")
			}
		}
	}()
	ctl, err := startControl(s, nopNotifier{}, slog.New(slog.DiscardHandler))
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.close()
	if v := loose.Load(); v != nil {
		t.Errorf("the control socket was seen at %s with a looser mode than 0600 (%s)", final, v)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(final, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Mode&0o7777 != 0o600 {
		t.Fatalf("%s: mode %o, %v; want a socket of mode 0600", final, st.Mode, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ctlPrivatePrefix+"*")); len(m) != 0 {
		t.Errorf("private directories left in the store: %v", m)
	}
	c := newSocketClient(final, shortTimeouts)
	defer c.Close()
	if _, err := c.Stats(); err != nil {
		t.Fatalf("stats through %s: %v", final, err)
	}
	c.Close()
	ctl.close()
	if _, err := os.Lstat(final); !os.IsNotExist(err) {
		t.Errorf("after close, %s: %v; want it removed", final, err)
	}
}

// TestListenPrivateLongPath: a store whose path leaves no room for the
// control socket's is refused with the reason and by how much, not bind's
// "invalid argument".
func TestListenPrivateLongPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < maxSocketPath {
		dir = filepath.Join(dir, "a-directory-name")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := listenPrivate(filepath.Join(dir, socketName))
	if err == nil || !strings.Contains(err.Error(), "bytes, over the") {
		t.Fatalf("listen at a %d-byte path: %v", len(dir), err)
	}
	t.Log(err)
}
