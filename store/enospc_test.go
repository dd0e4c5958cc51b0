//go:build linux

package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/internal/testutil"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
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
	mnt := testutil.SmallFS(t, "tmpfs", 6<<20)
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

// logBuffer collects a store's log for the test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFullDisk fills the store's filesystem to the last byte (with the
// store's files, then a filler beside it) and checks that a full disk
// never wedges the store: writes fail with ENOSPC and leave nothing
// behind; removes, rmdir, rename over a file and the release of an orphan
// succeed, also after a reopen on the still-full disk with an index whose
// free pages hold no space; and once files are removed, writes work again.
// It runs with the index's journal and without it (--no-journal): without
// it, the orphan's release writes bbolt's pages at once and must take the
// reserve; with it, the release is a journal record and the reserve is
// taken only if the checkpoint at open finds no room (whether it does
// depends on what the journal freed as it opened).
func TestFullDisk(t *testing.T) {
	for _, kind := range []string{"tmpfs", "ext4"} {
		for _, journal := range []bool{true, false} {
			name := kind + "/journal"
			if !journal {
				name = kind + "/no-journal"
			}
			t.Run(name, func(t *testing.T) { testFullDisk(t, kind, journal) })
		}
	}
}

func testFullDisk(t *testing.T, kind string, journal bool) {
	requireRoot(t)
	mnt := testutil.SmallFS(t, kind, 16<<20)
	dir := filepath.Join(mnt, "store")
	if err := store.Init(dir, 16384); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	opts := store.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), NoJournal: !journal}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("store log:\n%s", logs)
		}
	})
	s, err := store.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()

	// Fill the disk through the store: files of decreasing sizes, some in
	// directories, some sharing content, until even a small one fails.
	files := map[string][]byte{}
	var names []string
	seed := uint64(0)
	for _, size := range []int{700_000, 150_000, 30_000, 4000, 100} {
		for {
			seed++
			name := fmt.Sprintf("d%d/f%d", seed%4, seed)
			b := randBytes(size, seed)
			if seed%5 == 0 && len(names) > 0 {
				// Half of an earlier file, then new bytes.
				prev := files[names[len(names)-1]]
				b = append(append([]byte{}, prev[:len(prev)/2]...), randBytes(size, seed)...)
			}
			_, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{})
			if err == nil {
				files[name] = b
				names = append(names, name)
				continue
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("put %s on a full disk: %v, want ENOSPC", name, err)
			}
			if _, err := s.Stat(name); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("failed put left %s behind: %v", name, err)
			}
			break
		}
	}
	t.Logf("%d files stored before the disk filled", len(files))
	if len(files) < 10 {
		t.Fatalf("only %d files fit", len(files))
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatalf("after failed puts: %v", err)
	}
	filler := filepath.Join(mnt, "filler")
	testutil.Fill(t, filler)

	// A put on the full disk fails cleanly.
	b := randBytes(50_000, 9999)
	if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "new", store.PutOptions{}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("put on a full disk: %v, want ENOSPC", err)
	}
	if _, err := s.Stat("new"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("failed put left its name: %v", err)
	}

	// Every kind of removal works on the full disk.
	take := func() string {
		name := names[0]
		names = names[1:]
		return name
	}
	remove := func(name string) {
		t.Helper()
		if err := s.Remove(name); err != nil {
			t.Fatalf("remove on a full disk: %v", err)
		}
		delete(files, name)
	}
	remove(take())
	testutil.Fill(t, filler)
	victim := take()
	d, err := s.Stat(path.Dir(victim))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveAt(d.Ino, path.Base(victim), false); err != nil {
		t.Fatalf("unlink on a full disk: %v", err)
	}
	delete(files, victim)
	testutil.Fill(t, filler)
	src, dst := take(), take()
	if err := s.Rename(src, dst); err != nil {
		t.Fatalf("rename over a file on a full disk: %v", err)
	}
	files[dst] = files[src]
	delete(files, src)
	names = append(names, dst)
	testutil.Fill(t, filler)
	// Empty a directory and remove it.
	ents, err := s.List("d1")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		remove("d1/" + e.Name)
		testutil.Fill(t, filler)
	}
	if err := s.Remove("d1"); err != nil {
		t.Fatalf("rmdir on a full disk: %v", err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { _, ok := files[n]; return !ok })

	// A file removed while open is an orphan; the store is closed as by a
	// crash, with the orphan in the index, the disk full, and an index
	// whose free pages hold no space.
	orphan := take()
	of, err := s.Open(orphan)
	if err != nil {
		t.Fatal(err)
	}
	remove(orphan)
	_ = of // never closed: the crash
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.SparsifyIndex(t, filepath.Join(dir, "kvfs.db"))
	testutil.Fill(t, filler)
	if s, err = store.Open(dir, opts); err != nil {
		t.Fatalf("reopen on a full disk: %v", err)
	}
	// Without the journal, the orphan's release had no space in the
	// index: it took the reserve.
	if !journal && !strings.Contains(logs.String(), "released the disk space reserve") {
		t.Fatal("the orphan's release on the full disk did not use the reserve")
	}
	if !slices.ContainsFunc(strings.Split(logs.String(), "\n"), func(l string) bool {
		return strings.Contains(l, "releasing orphaned inode")
	}) {
		t.Fatal("the orphan was not released at open")
	}
	for range 3 {
		testutil.Fill(t, filler)
		remove(take())
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s changed", name)
		}
	}

	// The space the removals freed takes new files.
	for i := range 3 {
		b := randBytes(100_000, uint64(5000+i))
		name := fmt.Sprintf("again/%d", i)
		if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{}); err != nil {
			t.Fatalf("put after removing files: %v", err)
		}
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s reads back wrong", name)
		}
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestSparseSourceOnFullTmpfs: a source file that ends in a hole, on a
// tmpfs with no room left, faults when its hole is read through a
// mapping (tmpfs allocates a page to read one); the put fails with
// ENOSPC naming the file, not with "source file changed (truncated)",
// and the store checks clean (red team, issue 29).
func TestSparseSourceOnFullTmpfs(t *testing.T) {
	requireRoot(t)
	mnt := testutil.SmallFS(t, "tmpfs", 4<<20)
	src := filepath.Join(mnt, "sparse")
	if err := os.WriteFile(src, bytes.Repeat([]byte{7}, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(src, 32<<20); err != nil { // 32 MiB of hole after it
		t.Fatal(err)
	}
	// Fill the tmpfs.
	fill, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fill.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	fill.Close()
	s := storetest.New(t, storetest.Options{})
	_, _, err = s.PutFile(ctx, src, "x", store.PutOptions{})
	if err == nil {
		// A kernel that reads a tmpfs hole without a page of its own:
		// then the put is right to succeed, and must read back.
		want := append(bytes.Repeat([]byte{7}, 64<<10), make([]byte, 32<<20-64<<10)...)
		if got := get(t, s, "x"); !bytes.Equal(got, want) {
			t.Fatal("the sparse file reads back wrong")
		}
		return
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), src) || strings.Contains(err.Error(), "truncated") {
		t.Fatalf("put of a sparse file on a full tmpfs: %v, want ENOSPC naming %s", err, src)
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
