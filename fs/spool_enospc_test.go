//go:build linux

package fs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestSpoolShortWrite: a write over committed cells that the spool's disk
// cuts short (ENOSPC part way) leaves every byte it did not write reading
// as its committed value, through the spool and through the commit of its
// changes; the bytes it reports written read as written. Cells the write
// meant to cover whole were not copied in, so before, the unwritten ones
// read (and were committed) as the spool file's holes: zeros. Cases: the
// write stops at a cell's boundary, inside a cell (whose committed tail
// cannot be copied in either: the write counts as ending at that cell's
// start), and before any byte, and a copy-in of an edge cell fails after
// cells before it were marked.
func TestSpoolShortWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a small tmpfs for the spool")
	}
	const C = 16 << 10 // 4 pages
	const page = 4096
	cases := []struct {
		name      string
		off, n    int64
		freePages int64
	}{
		{"stops at a cell boundary", 3 * C, 6 * C, 8},
		{"stops inside a cell", 3 * C, 6 * C, 6},
		{"writes nothing", 3 * C, 6 * C, 0},
		{"last cell copy-in fails", 3 * C, 4*C + 100, 0},
	}
	for k, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t, storetest.Options{ChunkSize: C})
			r := rand.New(rand.NewPCG(uint64(k), 7))
			old := make([]byte, 40*C+123)
			for i := range old {
				old[i] = byte(r.Uint32()) | 1 // never zero: a hole shows
			}
			ctx := context.Background()
			fi, _, err := s.Put(ctx, bytes.NewReader(old), int64(len(old)), "f", store.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			base, err := s.OpenIno(fi.Ino)
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			dir := testutil.SmallFS(t, "tmpfs", 1<<20)
			sp, err := newSpool(dir, base, C, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.close(true)
			filler := filepath.Join(dir, "filler")
			testutil.Fill(t, filler)
			fi2, err := os.Stat(filler)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filler, fi2.Size()-tc.freePages*page); err != nil {
				t.Fatal(err)
			}

			var st syscall.Statfs_t
			syscall.Statfs(dir, &st)
			t.Logf("free before the write: %d blocks of %d", st.Bavail, st.Bsize)
			data := bytes.Repeat([]byte{0xA5}, int(tc.n))
			n, werr := sp.write(data, tc.off)
			t.Logf("write of %d at %d: %d written, %v", tc.n, tc.off, n, werr)
			if werr == nil {
				t.Fatalf("the write was not cut short (%d written)", n)
			}
			want := append([]byte(nil), old...)
			copy(want[tc.off:], data[:n])
			got := make([]byte, len(old))
			if _, err := sp.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("spool reads %#x at %d, want %#x", got[i], i, want[i])
			}

			// Room again: the change commits as read.
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			nfi, _, err := s.CommitChanges(ctx, fi.Ino, sp.changes(), sp, store.CommitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.OpenIno(nfi.Ino)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("committed file reads %#x at %d, want %#x", got[i], i, want[i])
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestSpoolShortWriteGrows: a write that would grow the file and that the
// spool's disk cuts short leaves the file as long as the bytes it wrote,
// and the change commits. The cells past those bytes were marked dirty
// before the write and stayed so: dirty cells past the end of the file,
// which every commit of it refused ("dirty chunk K of an N-byte file"),
// so that fsync and close failed with EIO even once the disk had room,
// and the file lost every byte written since its last commit (red team,
// F1). Cases: a committed file grown from inside its last cells, and a
// new file (no committed version).
func TestSpoolShortWriteGrows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a small tmpfs for the spool")
	}
	const C = 16 << 10
	const page = 4096
	for k, tc := range []struct {
		name      string
		oldLen    int // 0: a new file
		off, n    int64
		freePages int64
	}{
		{"grows a committed file, stops in a cell", 40*C + 123, 38*C + 7, 8 * C, 6},
		{"grows a committed file, writes nothing", 40*C + 123, 40*C + 123, 8 * C, 0},
		{"new file, stops at a cell boundary", 0, 3 * C, 8 * C, 8},
		{"new file, stops in a cell", 0, 3*C + 5, 8 * C, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t, storetest.Options{ChunkSize: C})
			r := rand.New(rand.NewPCG(uint64(k), 8))
			old := make([]byte, tc.oldLen)
			for i := range old {
				old[i] = byte(r.Uint32()) | 1
			}
			ctx := context.Background()
			fi, _, err := s.Put(ctx, bytes.NewReader(old), int64(len(old)), "f", store.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var base *store.File
			if len(old) > 0 {
				if base, err = s.OpenIno(fi.Ino); err != nil {
					t.Fatal(err)
				}
				defer base.Close()
			}
			dir := testutil.SmallFS(t, "tmpfs", 1<<20)
			sp, err := newSpool(dir, base, C, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sp.close(true)
			want := append([]byte(nil), old...)
			if tc.oldLen == 0 { // the bytes before off, written with room
				head := bytes.Repeat([]byte{0x5A}, int(tc.off))
				if n, err := sp.write(head, 0); err != nil || n != len(head) {
					t.Fatalf("first write: %d, %v", n, err)
				}
				want = head
			}
			filler := filepath.Join(dir, "filler")
			testutil.Fill(t, filler)
			fi2, _ := os.Stat(filler)
			if err := os.Truncate(filler, fi2.Size()-tc.freePages*page); err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte{0xA5}, int(tc.n))
			n, werr := sp.write(data, tc.off)
			t.Logf("write of %d at %d: %d written, %v", tc.n, tc.off, n, werr)
			if werr == nil {
				t.Fatalf("the write was not cut short (%d written)", n)
			}
			if end := tc.off + int64(n); end > int64(len(want)) {
				want = append(want, make([]byte, end-int64(len(want)))...)
			}
			copy(want[tc.off:], data[:n])
			if sp.size != int64(len(want)) {
				t.Fatalf("spool size %d after the short write, want %d", sp.size, len(want))
			}
			got := make([]byte, len(want))
			if _, err := sp.ReadAt(got, 0); err != nil && len(got) > 0 {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("spool reads %#x at %d, want %#x", got[i], i, want[i])
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			nfi, _, err := s.CommitChanges(ctx, fi.Ino, sp.changes(), sp, store.CommitOptions{})
			if err != nil {
				t.Fatalf("commit after the short write, with room again: %v", err)
			}
			f, err := s.OpenIno(nfi.Ino)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got = make([]byte, len(want))
			if _, err := f.ReadAt(got, 0); err != nil && len(got) > 0 {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 || nfi.Size != int64(len(want)) {
				t.Fatalf("committed file (%d bytes) reads %#x at %d, want %d bytes", nfi.Size, got[max(i, 0)], i, len(want))
			}
		})
	}
}
