//go:build linux

package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func init() {
	// engineturnls SRC DIR T: engineturn, listing the blocks directory
	// before each existence check (ls -l, find, a collect's listing and
	// the engine's check in another thread).
	clients["engineturnls"] = func(args []string) error {
		blocks := filepath.Join(args[1], "blocks")
		listing = func() { os.ReadDir(blocks) }
		return clients["engineturn"](args)
	}
}

// TestSeenBlocksCachedStat: a listing of blocks/ (READDIRPLUS) right
// before the existence check. The listing's entries were cached for 1 ns,
// which the kernel rounds up to a jiffy: the stat that follows within it
// was answered from the kernel's cache, no sighting reached the daemon,
// and eviction took the blocks the engine had skipped (91 to 96 of 64
// seen ones evicted; the snapshot did not restore).
func TestSeenBlocksCachedStat(t *testing.T) {
	m, ns := seenMount(t, false)
	start := time.Now()
	e := startEngineTurnAs(t, "engineturnls", ns, "400")
	if e.Reused != 64 {
		t.Fatalf("turn 2 found %d blocks existing, want 64", e.Reused)
	}
	evictAll(t, m, 32)
	inGrace(t, start)
	e.commit()
	restoreOK(t, ns, "400")
}

// TestSeenBlocksDirRenamedIntoBlocks: a directory of files named by their
// sha256, renamed onto the name blocks, held files that were never hashed
// (not blobs): the engine found them existing and committed a manifest
// listing them, which did not keep them, and eviction removed every one.
// Such a rename now fails with EXDEV (mv copies the files in, as blocks).
func TestSeenBlocksDirRenamedIntoBlocks(t *testing.T) {
	m := newMount(t, "--blob-grace", "2s", "--evict-interval", "100ms")
	ns := m.path("fp/conv")
	x := filepath.Join(ns, "x")
	if err := os.MkdirAll(x, 0o700); err != nil {
		t.Fatal(err)
	}
	sh(t, fmt.Sprintf("cp %s/blocks/* %s/", seenFixtures, x))
	err := os.Rename(x, filepath.Join(ns, "blocks"))
	if errors.Is(err, syscall.EXDEV) {
		sh(t, fmt.Sprintf("mkdir %s/blocks && cp %s/* %s/blocks/ && rm -r %s", ns, x, ns, x))
	} else if err != nil {
		t.Fatal(err)
	}
	e := startEngineTurn(t, ns, "300")
	if e.Reused != 96 {
		t.Fatalf("found %d blocks existing, want 96", e.Reused)
	}
	e.commit()
	kvfs(t, "pin", filepath.Join(ns, "300.mlxkv"))
	sh(t, "sleep 3.5") // past the grace of every block and sighting
	evictAll(t, m, 64) // the blocks 300 does not list
	restoreOK(t, ns, "300")
}
