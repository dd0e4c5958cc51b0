//go:build linux

package fs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
)

// TestAsyncWriteFullDisk: writes answered before they land are only those
// whose space the spool file holds already (allocated ahead), so a disk
// filling up cuts a write short before it is answered, never after. Every
// write answered whole reads back once landed, no background error
// follows, and once room is made the same spool takes writes again (a
// write that failed in the background would fail every later one). The
// writes are appended, 128 KiB and unaligned odd sizes (a direct write
// from an unaligned buffer arrives as a large request and a small one),
// and the allocation past the end is freed before a commit (dropAhead).
func TestAsyncWriteFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a small tmpfs for the spool")
	}
	const C = 64 << 10
	dir := testutil.SmallFS(t, "tmpfs", 8<<20)
	sp, err := newSpool(dir, nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.allocStep = 256 << 10
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, bytes.Repeat([]byte{1}, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	r := rand.New(rand.NewPCG(3, 4))
	var want []byte
	early, cut := 0, false
	for i := 0; !cut && i < 1000; i++ {
		n := 128 << 10
		if i%3 == 2 {
			n = 1 + r.IntN(8<<10) // a small tail
		}
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(r.Uint32()) | 1
		}
		off := int64(len(want))
		got, err := sp.write(b, off)
		if a := sp.async.Load(); a != nil && got == n && err == nil && a.sub.Load() > a.land.Load() {
			early++
		}
		want = append(want, b[:got]...)
		if err != nil {
			if got == n {
				t.Fatalf("write %d: %v, yet %d bytes reported written", i, err, got)
			}
			cut = true
			t.Logf("write %d of %d at %d cut short: %d written, %v", i, n, off, got, err)
		}
	}
	if !cut {
		t.Fatal("the disk never filled")
	}
	if early == 0 {
		t.Fatal("no write was answered before it landed: the test proves nothing")
	}
	if err := sp.landed(); err != nil {
		t.Fatalf("a write answered whole failed in the background: %v", err)
	}
	check := func(stage string) {
		t.Helper()
		got := make([]byte, len(want))
		if n, err := sp.ReadAt(got, 0); n != len(want) || err != nil {
			t.Fatalf("%s: read %d of %d: %v", stage, n, len(want), err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("%s: spool reads %#x at %d, want %#x", stage, got[i], i, want[i])
		}
	}
	check("full")

	// Room again: the spool takes writes, answered early as before.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	b := bytes.Repeat([]byte{7}, 256<<10)
	if n, err := sp.write(b, int64(len(want))); n != len(b) || err != nil {
		t.Fatalf("write after room was made: %d, %v", n, err)
	}
	want = append(want, b...)
	if sp.allocEnd <= sp.size {
		t.Fatalf("nothing allocated past the end (%d, size %d)", sp.allocEnd, sp.size)
	}
	sp.dropAhead()
	check("after room was made")
	var st syscall.Stat_t
	if err := syscall.Fstat(int(sp.f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if disk, limit := st.Blocks*512, (sp.size+4095)/4096*4096; disk > limit {
		t.Fatalf("spool file holds %d bytes of disk for %d bytes after dropAhead", disk, sp.size)
	}
}
