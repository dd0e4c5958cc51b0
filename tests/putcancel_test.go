//go:build linux

package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPutInterruptedWhileDaemonStores: Ctrl-C of kvfs put on a mounted
// store, once the upload is done and the daemon is storing the file,
// cancels the daemon's work too: put exits 4 ("interrupted") and the file
// does not appear. Before, the request ran on in the daemon, put waited
// for it and exited 0, and the file was stored.
func TestPutInterruptedWhileDaemonStores(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "src")
	const size = 768 << 20
	sh(t, "head -c 768M /dev/urandom > "+src)
	put := exec.Command(kvfsBin, "put", m.store, src, "big")
	var stderr strings.Builder
	put.Stderr = &stderr
	if err := put.Start(); err != nil {
		t.Fatal(err)
	}
	// The upload is done when the daemon's spool of it is whole.
	deadline := time.Now().Add(60 * time.Second)
	for {
		spools, _ := filepath.Glob(filepath.Join(m.store, "spool", "put-*"))
		if len(spools) == 1 {
			if fi, err := os.Stat(spools[0]); err == nil && fi.Size() == size {
				break
			}
		}
		if time.Now().After(deadline) {
			put.Process.Kill()
			t.Fatalf("the daemon never had the whole upload: %v", spools)
		}
		time.Sleep(2 * time.Millisecond)
	}
	put.Process.Signal(syscall.SIGINT)
	err := put.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("put after SIGINT: %v (want exit 4)\n%s", err, stderr.String())
	}
	// The daemon's request ends with the connection; give it a moment.
	time.Sleep(time.Second)
	if _, err := os.Stat(m.path("big")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("big after an interrupted put: %v; want it absent", err)
	}
	if out := kvfs(t, "ls", m.store); strings.Contains(out, "big") {
		t.Fatalf("kvfs ls after an interrupted put:\n%s", out)
	}
}
