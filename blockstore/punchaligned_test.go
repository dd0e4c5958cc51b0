package blockstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestAlignedHole: the part of a range macOS's F_PUNCHHOLE may punch is
// its whole blocks.
func TestAlignedHole(t *testing.T) {
	cases := []struct {
		off, n, block   int64
		holeOff, holeLn int64
	}{
		{0, 8192, 4096, 0, 8192},
		{4096, 4096, 4096, 4096, 4096},
		{100, 8192, 4096, 4096, 4096},
		{100, 12188, 4096, 4096, 8192},
		{100, 4000, 4096, 100, 0},  // inside one block
		{4000, 200, 4096, 4000, 0}, // across a boundary, no whole block
		{4000, 4192, 4096, 4096, 4096},
		{0, 4095, 4096, 0, 0},
		{5, 1 << 20, 16384, 16384, 1<<20 - 16384},
		{0, 0, 4096, 0, 0},
		{10, 100, 0, 10, 0}, // no block size known
	}
	for _, c := range cases {
		o, l := alignedHole(c.off, c.n, c.block)
		if o != c.holeOff || l != c.holeLn {
			t.Errorf("alignedHole(%d, %d, %d) = %d, %d; want %d, %d", c.off, c.n, c.block, o, l, c.holeOff, c.holeLn)
		}
	}
}

// TestPunchAligned: the whole blocks go to the punch, the head and tail
// are zeroed, and a filesystem that cannot punch gets the whole range
// zeroed; a real error is returned. The range reads as zeros after every
// successful call, and the bytes around it are untouched.
func TestPunchAligned(t *testing.T) {
	const block, size = 4096, 6 * 4096
	notSupported := func(error) bool { return true }
	cases := []struct {
		name      string
		off, n    int64
		punchErr  error
		wantPunch [][2]int64
		wantErr   bool
	}{
		{"aligned", 4096, 8192, nil, [][2]int64{{4096, 8192}}, false},
		{"unaligned ends", 100, 3*4096 + 50, nil, [][2]int64{{4096, 8192}}, false},
		{"no whole block", 4000, 200, nil, nil, false},
		{"not supported", 100, 3 * 4096, syscall.ENOTSUP, [][2]int64{{4096, 8192}}, false},
		{"other error", 4096, 4096, syscall.EIO, [][2]int64{{4096, 4096}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "pack"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			orig := bytes.Repeat([]byte{0xa5}, size)
			if _, err := f.WriteAt(orig, 0); err != nil {
				t.Fatal(err)
			}
			var got [][2]int64
			punch := func(off, n int64) error {
				got = append(got, [2]int64{off, n})
				if c.punchErr != nil {
					return c.punchErr
				}
				_, err := f.WriteAt(make([]byte, n), off) // what a punch reads as
				return err
			}
			unsupported := punchUnsupported
			if c.punchErr == nil {
				unsupported = notSupported // never asked
			}
			err = punchAligned(f, c.off, c.n, block, punch, unsupported)
			if (err != nil) != c.wantErr || (c.wantErr && !errors.Is(err, c.punchErr)) {
				t.Fatalf("err %v, want error %v", err, c.wantErr)
			}
			if len(got) != len(c.wantPunch) || (len(got) > 0 && got[0] != c.wantPunch[0]) {
				t.Errorf("punched %v, want %v", got, c.wantPunch)
			}
			if c.wantErr {
				return
			}
			b := make([]byte, size)
			if _, err := f.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			want := bytes.Clone(orig)
			clear(want[c.off : c.off+c.n])
			if !bytes.Equal(b, want) {
				t.Errorf("file does not read as the range zeroed and the rest kept")
			}
		})
	}
}

// TestPunchUnsupported: the errnos that send a punch to zeroing.
func TestPunchUnsupported(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.ENOTSUP, syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.ENOTTY, syscall.EINVAL} {
		if !punchUnsupported(e) {
			t.Errorf("%v: not taken as unsupported", e)
		}
	}
	for _, e := range []syscall.Errno{syscall.EIO, syscall.ENOSPC, syscall.EBADF, syscall.EINTR} {
		if punchUnsupported(e) {
			t.Errorf("%v: taken as unsupported", e)
		}
	}
}
