package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
