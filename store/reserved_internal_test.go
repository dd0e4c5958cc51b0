package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/kvfs/kvfs/manifest"
)

// TestReservedName: no entry may take /.kvfs, where a mount shows its
// virtual tree and would hide it: put, mkdir, rename and create refuse it
// (the name is fine anywhere below the root).
func TestReservedName(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	b := []byte("x")
	checks := map[string]error{}
	_, _, checks["put"] = s.Put(ctx, bytes.NewReader(b), 1, "/.kvfs/x", PutOptions{})
	checks["mkdir"] = s.Mkdir(".kvfs", 0o755, false)
	if _, _, err := s.Put(ctx, bytes.NewReader(b), 1, "a", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	checks["rename"] = s.Rename("a", ".kvfs")
	_, checks["create"] = s.CreateAt(manifest.RootIno, ".kvfs", 0o644, Owner{})
	_, checks["mkdirat"] = s.MkdirAt(manifest.RootIno, ".kvfs", 0o755, Owner{})
	checks["renameat"] = s.RenameAt(manifest.RootIno, "a", manifest.RootIno, ".kvfs", false)
	for op, err := range checks {
		if !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("%s of /.kvfs: %v, want invalid", op, err)
		}
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(b), 1, "d/.kvfs", PutOptions{}); err != nil {
		t.Errorf("put d/.kvfs: %v", err)
	}
}
