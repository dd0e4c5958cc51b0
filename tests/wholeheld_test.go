//go:build linux

package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWholeViewHoldsSnapshot: a blocks-layout snapshot whose whole-layout
// view (/.kvfs/whole) is open is not evicted, nor are its blocks, however
// far past capacity the store is: the view reads back the engine's own
// whole-layout file. Before, the evictor removed the manifest and then
// its blocks under the open view, whose reads failed with ESTALE (red
// team, F5); a plain open of the manifest already held it.
func TestWholeViewHoldsSnapshot(t *testing.T) {
	m := newMount(t, "--blob-grace", "1ms", "--evict-interval", "100ms")
	const fx = "../mlx/testdata/mlxbun"
	const name = "00000000-0000-4000-8000-000000000400.mlxkv"
	sh(t, "mkdir -p "+m.path("fp")+" && cp -r "+fx+"/blocks/fixture-fingerprint/base "+m.path("fp/"))
	// Files to evict beside it.
	for i := 0; i < 8; i++ {
		randFile(t, m.path("idle"+string(rune('0'+i))), 256<<10, uint64(i))
	}
	want, err := os.ReadFile(filepath.Join(fx, "whole/fixture-fingerprint/base", name))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // past the blob grace
	view, err := os.Open(m.path(".kvfs/whole/fp/base/" + name))
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	head := make([]byte, 4096)
	if _, err := view.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "config", m.store, "capacity=1")
	waitEvictions(t, m, 8)
	time.Sleep(500 * time.Millisecond) // more passes, over the held snapshot
	got := make([]byte, len(want))
	copy(got, head)
	if n, err := view.ReadAt(got[4096:], 4096); n != len(want)-4096 {
		t.Fatalf("view read while held, past capacity: %d bytes, %v", n, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the held view reads other bytes than the engine's whole-layout file")
	}
	if _, err := os.Stat(m.path("fp/base/" + name)); err != nil {
		t.Fatalf("the manifest under an open view: %v", err)
	}
}

// TestWholeViewFstatAfterReplace: fstat of an open /.kvfs/whole view of a
// blocks-layout snapshot answers for the version it holds after the
// original is rewritten in place with another snapshot, and its reads go
// on returning that version's bytes. (A guard: it passed before the
// handle's own attributes were used too; a red team saw ESTALE there for
// prefix views.)
func TestWholeViewFstatAfterReplace(t *testing.T) {
	m := newMount(t)
	const fx = "../mlx/testdata/mlxbun"
	const name = "00000000-0000-4000-8000-000000000400.mlxkv"
	const other = "00000000-0000-4000-8000-000000000300.mlxkv"
	sh(t, "mkdir -p "+m.path("fp")+" && cp -r "+fx+"/blocks/fixture-fingerprint/base "+m.path("fp/"))
	want, err := os.ReadFile(filepath.Join(fx, "whole/fixture-fingerprint/base", name))
	if err != nil {
		t.Fatal(err)
	}
	view, err := os.Open(m.path(".kvfs/whole/fp/base/" + name))
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	sh(t, "cp "+m.path("fp/base/"+other)+" "+m.path("fp/base/"+name)) // rewritten in place
	fi, err := view.Stat()
	if err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("fstat of the open view after its original was replaced: %v, %v (want %d bytes)", fi, err, len(want))
	}
	got := make([]byte, len(want))
	if n, err := view.ReadAt(got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read of the open view after the replace: %d bytes, %v", n, err)
	}
}

// waitEvictions waits (up to 15 s) until the daemon has logged n
// evictions.
func waitEvictions(t *testing.T, m *mount, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
		if strings.Count(string(log), "msg=evicted") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle files were not evicted:\n%s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
