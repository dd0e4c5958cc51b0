package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/store"
)

// requireRoot fails a test that needs root when it is not root, unless the
// developer opted out with KVFS_TEST_NO_ROOT=1 (never set in CI, where
// tests run as root): a test that cannot run must not pass silently.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("KVFS_TEST_NO_ROOT") == "1" {
		t.Skip("needs root; skipped because KVFS_TEST_NO_ROOT=1")
	}
	t.Fatal("needs root (to mount a small tmpfs); run as root or set KVFS_TEST_NO_ROOT=1 to skip")
}

// TestENOSPC fills a small filesystem: the failing ingest returns a clear
// error, the store still opens and checks clean, and nothing committed is
// lost.
func TestENOSPC(t *testing.T) {
	requireRoot(t)
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=6m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	dir := filepath.Join(mnt, "store")
	if err := store.Init(dir, 16384); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string][]byte{}
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		b := randBytes(700_000, uint64(i))
		name := fmt.Sprintf("f%d", i)
		if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{}); err != nil {
			full = err
			break
		}
		committed[name] = b
	}
	if full == nil {
		t.Fatal("6 MiB filesystem never filled")
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("error is not ENOSPC: %v", full)
	}
	t.Logf("after %d files: %v", len(committed), full)
	if len(committed) == 0 {
		t.Fatal("nothing committed before the disk filled")
	}
	// Removing a file frees space and a new put fits again.
	for name := range committed {
		if err := s.Remove(name); err != nil {
			t.Fatal(err)
		}
		delete(committed, name)
		break
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatalf("reopen after ENOSPC: %v", err)
	}
	defer s.Close()
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	for name, b := range committed {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s changed", name)
		}
	}
	b := randBytes(300_000, 1000)
	if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "after", store.PutOptions{}); err != nil {
		t.Fatalf("put after freeing space: %v", err)
	}
}
