package pool_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestTakeOver: a host that takes over a lease file revokes the lease
// recorded there (its predecessor's, as if that one had died), and the
// predecessor's claim on a name goes with it at once; a record of another
// pool is left alone; the successor records its own lease.
func TestTakeOver(t *testing.T) {
	s := startServices(t)
	file := filepath.Join(t.TempDir(), "lease")
	a := s.host(t, s.config(t, t.TempDir()))
	if err := a.TakeOver(ctx, file); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(file)
	if err != nil || len(rec) == 0 {
		t.Fatalf("no lease recorded: %v", err)
	}
	b := s.host(t, s.config(t, t.TempDir()))
	if err := b.Reserve(ctx, "x"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("reserve x while a holds it: %v, want ErrExist", err)
	}
	other := filepath.Join(t.TempDir(), "other")
	os.WriteFile(other, append([]byte("kvfs/another/pool#/"), rec[len(rec)-40:]...), 0o600)
	if err := b.TakeOver(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve(ctx, "x"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("after a take-over of another pool's record: reserve x: %v, want ErrExist", err)
	}
	if err := b.TakeOver(ctx, file); err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve(ctx, "x"); err != nil {
		t.Fatalf("after the take-over: reserve x: %v", err)
	}
	if now, _ := os.ReadFile(file); string(now) == string(rec) {
		t.Fatal("the successor did not record its lease")
	}
}
