//go:build linux

package tests

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests also run with KVFS_TEST_MOUNT_ARGS=--simulate-darwin
// (scripts/test): every mount then behaves as the macOS build does where
// Linux can (fs/simdarwin.go, docs/MACOS.md), with no kernel notifications
// and a one-second entry and attribute timeout. What differs by design is
// bounded here, in one place, and only in that mode: the tests keep
// Linux's expectations otherwise.

// simulatingDarwin reports whether this run's mounts simulate macOS.
func simulatingDarwin() bool {
	return slices.Contains(strings.Fields(os.Getenv("KVFS_TEST_MOUNT_ARGS")), "--simulate-darwin")
}

// darwinStaleBound is how long a change made behind the kernel's back (a
// put, mv or rm through the control socket, an eviction) may stay unseen
// through a macOS mount: the kernel's entry, attribute and negative
// timeout there (cmd/kvfs/mountopts.go, macTimeout), plus slack for a
// loaded machine.
const darwinStaleBound = time.Second + 500*time.Millisecond

// seenBehindKernel checks that the mount shows a change just made behind
// the kernel's back (check returns nil once it does). On Linux the daemon
// tells the kernel before the command returns, so check must pass at
// once; simulating macOS, where nothing is told, it must pass within
// darwinStaleBound. The test fails with check's last error.
func seenBehindKernel(t testing.TB, check func() error) {
	t.Helper()
	err := check()
	if err == nil || !simulatingDarwin() {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	for deadline := time.Now().Add(darwinStaleBound); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if err = check(); err == nil {
			return
		}
	}
	t.Fatalf("not seen within %v (simulating macOS): %v", darwinStaleBound, err)
}
