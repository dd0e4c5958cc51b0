// Package storetest creates stores for tests and checks their invariants
// when each test ends, as bbolt's btesting does for its databases.
package storetest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/store"
)

// Options for New.
type Options struct {
	ChunkSize int64 // 0: store.DefaultChunkSize
	Store     store.Options
	Dir       string // where to create it; "" for a new temporary directory
}

// New initialises and opens a store for t. At cleanup it checks the store's
// invariants (with chunk verification) and closes it; a violation fails t.
func New(t testing.TB, opts Options) *store.Store {
	t.Helper()
	if opts.ChunkSize == 0 {
		opts.ChunkSize = store.DefaultChunkSize
	}
	dir := opts.Dir
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "store")
	}
	if err := store.Init(dir, opts.ChunkSize); err != nil {
		t.Fatal(err)
	}
	if opts.Store.Logger == nil && testing.Verbose() {
		opts.Store.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	s, err := store.Open(dir, opts.Store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { MustCheck(t, s) })
	return s
}

// MustCheck checks s and closes it.
func MustCheck(t testing.TB, s *store.Store) {
	t.Helper()
	if s.Closed() {
		return
	}
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// Reopen closes s after checking it and opens the same store again, so a
// test can check what survives a restart; the reopened store is checked at
// cleanup too.
func Reopen(t testing.TB, s *store.Store, opts store.Options) *store.Store {
	t.Helper()
	dir := s.Dir()
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := store.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { MustCheck(t, s2) })
	return s2
}
