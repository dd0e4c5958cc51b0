//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
)

func init() {
	// renames N A B: rename A to B and back, N times each; print how many
	// renames failed, then the first error.
	clients["renames"] = renamesClient
}

func renamesClient(args []string) error {
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	a, b := args[1], args[2]
	failed := 0
	var first error
	for i := 0; i < n; i++ {
		if err := os.Rename(a, b); err != nil {
			failed++
			if first == nil {
				first = err
			}
			continue
		}
		if err := os.Rename(b, a); err != nil {
			failed++
			if first == nil {
				first = err
			}
			os.Rename(b, a)
		}
	}
	fmt.Println(failed, first)
	return nil
}

// TestFullDiskJournalSegment: on a full disk, namespace changes go on
// until the journal needs a new segment, which the disk has no room for.
// The store gives up its disk space reserve for it (the journal asks
// before giving up) instead of failing the journal for good: renames go
// on, and the removal that makes room succeeds through the mount; every
// file reads back whole, and new files can be written once there is room.
// (Before, the first segment the full disk refused failed every later
// create, rename and unlink, rm included, until a remount.)
func TestFullDiskJournalSegment(t *testing.T) {
	m, disk, _ := newSmallFSMount(t, "tmpfs", 8<<20)
	big := fullDiskContent(1, 1<<20+333)
	small := fullDiskContent(2, 5000)
	if err := os.WriteFile(m.path("big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("a"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "sync -f "+m.path("a"))
	testutil.Fill(t, filepath.Join(disk, "filler"))

	// The journal's segments on this disk are 256 KiB; a rename's record
	// is about a hundred bytes: 3000 round trips pass a segment's end.
	out := runClientOK(t, "renames", "3000", m.path("a"), m.path("b"))
	var failed int
	fmt.Sscan(out, &failed)
	if failed != 0 {
		t.Errorf("renames on the full disk: %s", out)
	}
	if out, err := exec.Command("rm", m.path("big")).CombinedOutput(); err != nil {
		t.Fatalf("rm on the full disk after the renames: %v\n%s", err, out)
	}
	if got, err := os.ReadFile(m.path("a")); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("a after the renames: %d bytes, %v", len(got), err)
	}
	os.Remove(filepath.Join(disk, "filler"))
	if err := os.WriteFile(m.path("c"), big, 0o644); err != nil {
		t.Fatalf("write once there is room: %v", err)
	}
	sh(t, "sync -f "+m.path("c"))
	if got, err := os.ReadFile(m.path("c")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("c: %d bytes, %v", len(got), err)
	}
}
