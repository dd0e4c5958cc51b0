//go:build linux

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWholeViewOpenSurvivesRename: a descriptor open on a view keeps
// reading the version it opened, and fstat on it keeps answering, after
// the original's name is renamed away, renamed over by another snapshot
// or unlinked, as an open file on a disk does. The reader is a separate
// process (holdopen); it reads 1 MiB and an unaligned range, the test
// changes the name, and the reader then reads unaligned ranges across the
// rest (past what readahead fetched) and the whole file at its fstat
// size. For /.kvfs/whole of both layouts and /.kvfs/prefix of both. Before,
// an open whole view of a whole-layout snapshot turned ESTALE: its handle
// was a plain reader, which the view's Getattr did not recognise, so the
// kernel's getattr during a read walked the name and found it gone.
func TestWholeViewOpenSurvivesRename(t *testing.T) {
	m := newMount(t)
	// 16 KiB a token: a 6 MiB snapshot, many chunks (and, for blocks,
	// many blocks).
	const total, cut = 384, 300
	// The bytes each view shows: the whole snapshot, or its first cut
	// tokens, as the mlx Writer lays them out (seed 1; seed 2 is the
	// snapshot renamed over it).
	whole, prefix := readRef(t, total, total), readRef(t, total, cut)
	for _, kind := range []struct{ name, layout, view string }{
		{"whole/whole", "whole", ".kvfs/whole/"},
		{"whole/blocks", "blocks", ".kvfs/whole/"},
		{"prefix/whole", "whole", ".kvfs/prefix/"},
		{"prefix/blocks", "blocks", ".kvfs/prefix/"},
	} {
		want := whole
		if kind.view == ".kvfs/prefix/" {
			want = prefix
		}
		// Not a directory named blocks: that one holds blobs.
		dir := "v/" + strings.ReplaceAll(kind.name, "/", "-")
		if err := os.MkdirAll(m.path(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, change := range []string{"rename-away", "rename-over", "unlink"} {
			t.Run(kind.name+"/"+change, func(t *testing.T) {
				rel := filepath.Join(dir, change+".mlxkv")
				runClientOK(t, "prefixwrite", "llama4", kind.layout, m.path(rel), fmt.Sprint(total), "1")
				other := filepath.Join(dir, change+".other.mlxkv")
				if change == "rename-over" {
					runClientOK(t, "prefixwrite", "llama4", kind.layout, m.path(other), fmt.Sprint(total), "2")
				}
				view := kind.view + rel
				if kind.view == ".kvfs/prefix/" {
					view = fmt.Sprintf("%s@%d", view, cut)
				}
				h := startHolder(t, m.path(view))
				n := int64(len(want))
				pread := func(off, k int64) {
					t.Helper()
					k = min(k, n-off)
					if got := h.ask(t, fmt.Sprintf("pread %d %d", off, k)); got != sumOf(want[off:off+k]) {
						t.Fatalf("pread %d %d of the open view (%s): %s, want %s", off, k, change, got, sumOf(want[off:off+k]))
					}
				}
				pread(0, 1<<20)
				pread(1<<20+4097, 300001)

				switch change {
				case "rename-away":
					err := os.Rename(m.path(rel), m.path(rel+".moved"))
					if err != nil {
						t.Fatal(err)
					}
				case "rename-over":
					if err := os.Rename(m.path(other), m.path(rel)); err != nil {
						t.Fatal(err)
					}
				case "unlink":
					if err := os.Remove(m.path(rel)); err != nil {
						t.Fatal(err)
					}
				}

				// Unaligned ranges, the last ones far past readahead.
				pread(n-1000003, 777777)
				pread(3<<20-13, 1<<20+29)
				pread(n-5, 100)
				pread(2<<20+1, 65535)
				// fstat, then the whole file at that size.
				if got := h.ask(t, "read"); got != sumOf(want) {
					t.Fatalf("fstat and read of the open view after %s: %s, want %s", change, got, sumOf(want))
				}
			})
		}
	}
}

// readRef reads the whole-layout file that the mlx Writer makes of the
// first n of total tokens of llama4 drawn from seed 1.
func readRef(t *testing.T, total, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(writeRef(t, llama4, total, n, 1))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
