//go:build linux

package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
)

// TestShortWriteKeepsCommittedBytes: a write into a committed file on a
// full disk fails or stops early. Whatever it reports, every byte it did
// not write keeps its committed value after a later fsync: the cells the
// write meant to cover whole were not copied into the spool, and (before)
// stayed marked as written, so their holes were committed as zeros. Run
// with cell-aligned and unaligned writes, on a filler that leaves a few
// pages, so that some writes stop part way.
func TestShortWriteKeepsCommittedBytes(t *testing.T) {
	const C = 64 << 10
	for k, w := range []struct{ off, n int64 }{{5 * C, 2 * C}, {5*C - 1000, 3*C + 2000}, {3 * C, 6 * C}} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			m, disk, _ := newSmallFSMount(t, "tmpfs", 8<<20, "--chunk-size", "64KiB")
			old := fullDiskContent(uint64(10+k), 1_500_000)
			if err := os.WriteFile(m.path("A"), old, 0o644); err != nil {
				t.Fatal(err)
			}
			sh(t, "sync -f "+m.path("A"))
			// Fill the disk beside the store, leaving a few pages (a
			// write may get some of them).
			filler := filepath.Join(disk, "filler")
			testutil.Fill(t, filler)
			if err := os.Truncate(filler, max(0, fileSize(t, filler)-int64(k)*(90<<10))); err != nil {
				t.Fatal(err)
			}

			f, err := os.OpenFile(m.path("A"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			neu := bytes.Repeat([]byte{0xA5}, int(w.n))
			n, werr := f.WriteAt(neu, w.off)
			t.Logf("write of %d at %d: %d written, %v", w.n, w.off, n, werr)
			if werr != nil && !errors.Is(werr, syscall.ENOSPC) {
				t.Fatalf("write: %v", werr)
			}
			// The bytes it reports written are new; the rest of its
			// range may be old or new (a write that fails part way
			// may have changed some: POSIX leaves them unspecified),
			// never anything else; every other byte is old.
			want := append([]byte(nil), old...)
			copy(want[w.off:], neu[:n])

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("ok"), 15*C+3); err != nil {
				t.Fatal(err)
			}
			copy(want[15*C+3:], "ok")
			if err := f.Sync(); err != nil {
				t.Fatalf("fsync once there is room: %v", err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(m.path("A"))
			if err != nil {
				t.Fatal(err)
			}
			for i := w.off + int64(n); i < w.off+w.n && i < int64(len(got)); i++ {
				if got[i] == neu[0] {
					want[i] = got[i]
				}
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				j := len(got)
				for j > i && got[j-1] == want[j-1] {
					j--
				}
				t.Fatalf("A differs from its committed bytes plus the %d bytes written in [%d, %d): %d bytes of 0xA5, %d zeros (%d bytes, want %d)",
					n, i, j, bytes.Count(got[i:j], []byte{0xA5}), bytes.Count(got[i:j], []byte{0}), len(got), len(want))
			}
		})
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
