package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store/storetest"
)

// TestAsyncWriteFailure: a write answered before it landed that then
// fails in the spool file is the spool's error from then on: the next
// write, a read of the spool and the wait before a commit report it, and
// nothing reads the bytes that did not land.
func TestAsyncWriteFailure(t *testing.T) {
	const C = 64 << 10
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.allocStep = 4 * C
	a := bytes.Repeat([]byte{1}, 2*C)
	if n, err := sp.write(a, 0); n != len(a) || err != nil {
		t.Fatalf("first write: %d, %v", n, err)
	}
	if sp.async.Load() == nil {
		t.Fatal("a large appended write was not answered early")
	}
	if err := sp.landed(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(a))
	if n, err := sp.ReadAt(got, 0); n != len(a) || err != nil || !bytes.Equal(got, a) {
		t.Fatalf("read of the landed write: %d, %v, equal %v", n, err, bytes.Equal(got, a))
	}
	sp.async.Load().write = func(*os.File, []byte, int64) (int, error) { return 0, syscall.EIO }
	if n, err := sp.write(bytes.Repeat([]byte{2}, 2*C), int64(len(a))); n != 2*C || err != nil {
		t.Fatalf("second write (answered before it fails): %d, %v", n, err)
	}
	if err := sp.landed(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("wait for the writes: %v, want EIO", err)
	}
	if _, err := sp.write([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a write after the failure: %v, want EIO", err)
	}
	if _, err := sp.write(bytes.Repeat([]byte{3}, 2*C), 4*C); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a large write after the failure: %v, want EIO", err)
	}
	if _, err := sp.ReadAt(got, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a read after the failure: %v, want EIO", err)
	}
	if err := sp.truncate(C); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a truncation after the failure: %v, want EIO", err)
	}
}

// TestAsyncWriteBudget: the bytes answered early and not landed yet stay
// within the daemon's budget: a write that finds no room lands before it
// is answered, every byte reads back, and the budget is whole again once
// the writes landed.
func TestAsyncWriteBudget(t *testing.T) {
	const C = 64 << 10
	const w = 2 * C
	sp, err := newSpool(t.TempDir(), nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	budget := newAsyncBudget(2 * w)
	sp.asyncMem = budget
	var want []byte
	for i := range 10 {
		b := bytes.Repeat([]byte{byte(i + 1)}, w)
		if n, err := sp.write(b, int64(len(want))); n != w || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
		if i == 0 {
			// Slow the writer down: the queue fills, the budget runs out.
			sp.landed()
			sp.async.Load().write = func(f *os.File, b []byte, off int64) (int, error) {
				time.Sleep(20 * time.Millisecond)
				return writeAt(f, b, off)
			}
		}
		if left := budget.left.Load(); left < 0 {
			t.Fatalf("budget at %d after write %d", left, i)
		}
		want = append(want, b...)
	}
	if err := sp.landed(); err != nil {
		t.Fatal(err)
	}
	if sub := sp.async.Load().sub.Load(); sub >= 10 {
		t.Fatalf("all %d writes answered early with room for 2", sub)
	}
	if left := budget.left.Load(); left != 2*w {
		t.Fatalf("budget %d after the writes landed, want %d", left, 2*w)
	}
	got := make([]byte, len(want))
	if n, err := sp.ReadAt(got, 0); n != len(want) || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %d, %v, equal %v", n, err, bytes.Equal(got, want))
	}
}
