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
		t.Fatal("needs root to mount a small filesystem for the spool")
	}
	// ext4 keeps what a failed allocation got before it ran out: that must
	// not stay with the spool (and the pack it may become).
	for _, kind := range []string{"tmpfs", "ext4"} {
		t.Run(kind, func(t *testing.T) { testAsyncWriteFullDisk(t, kind) })
	}
}

func testAsyncWriteFullDisk(t *testing.T, kind string) {
	const C = 64 << 10
	dir := testutil.SmallFS(t, kind, 16<<20)
	sp, err := newSpool(dir, nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.allocStep = 256 << 10
	filler := filepath.Join(dir, "filler")
	testutil.Fill(t, filler)
	if err := os.Truncate(filler, fileSize(t, filler)-4<<20); err != nil {
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
	sp.landed()
	checkDisk(t, sp, "after the disk filled")
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
	checkDisk(t, sp, "after dropAhead")
}

// checkDisk fails unless the spool file holds no more disk than its size
// (and a block of the extent tree's).
func checkDisk(t *testing.T, sp *spool, stage string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(sp.f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if disk, limit := st.Blocks*512, (sp.size+4095)/4096*4096+4096; disk > limit {
		t.Fatalf("%s: spool file holds %d bytes of disk for %d bytes", stage, disk, sp.size)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestAsyncWriteSizeLimit: no write past the daemon's file size limit is
// answered before it lands (an allocation that keeps the size does not
// check the limit, and the write would fail with EFBIG after its answer).
func TestAsyncWriteSizeLimit(t *testing.T) {
	const C = 64 << 10
	sp, err := newSpool(t.TempDir(), nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.sizeLimit = 3 * C
	b := bytes.Repeat([]byte{9}, 2*C)
	if n, err := sp.write(b, 0); n != len(b) || err != nil {
		t.Fatal(n, err)
	}
	a := sp.async.Load()
	if a == nil {
		t.Fatal("a write below the limit was not answered early")
	}
	sub := a.sub.Load()
	if n, err := sp.write(b, 2*C); n != len(b) || err != nil {
		t.Fatal(n, err)
	}
	if a.sub.Load() != sub {
		t.Fatal("a write past the file size limit was answered before it landed")
	}
}

// TestAsyncWriteFailedAllocation: an allocation ahead that fails for want
// of space may have allocated part of its range (ext4 keeps what it got):
// the spool gives it back, so the file holds no more disk than its bytes
// (the spool may become a pack as it is, which would keep them for good)
// and the disk's last free bytes stay free for other writers.
func TestAsyncWriteFailedAllocation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a small ext4 for the spool")
	}
	const C = 64 << 10
	dir := testutil.SmallFS(t, "ext4", 16<<20)
	filler := filepath.Join(dir, "filler")
	testutil.Fill(t, filler)
	if err := os.Truncate(filler, fileSize(t, filler)-4<<20); err != nil {
		t.Fatal(err)
	}
	sp, err := newSpool(dir, nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.allocStep = 8 << 20 // more than the disk has left
	b := bytes.Repeat([]byte{5}, 128<<10)
	for off := int64(0); off < 1<<20; off += int64(len(b)) {
		if n, err := sp.write(b, off); n != len(b) || err != nil {
			t.Fatalf("write at %d: %d, %v", off, n, err)
		}
	}
	if err := sp.landed(); err != nil {
		t.Fatal(err)
	}
	checkDisk(t, sp, "after a failed allocation")
}
