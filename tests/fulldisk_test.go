//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/internal/testutil"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func init() {
	// fill DIR SEED SIZES...: write files into DIR's subdirectories
	// d0..d2 (content from fullDiskContent, seeds from SEED on), of the
	// comma-separated SIZES in turn, until one fails with ENOSPC; then go
	// on with the next SIZES. Print "stored NAME SIZE SEED" for each file closed without an
	// error and "enospc NAME SIZE SEED ACKED OP" for each that failed
	// (ACKED: bytes its successful writes took). Other errors fail.
	clients["fill"] = fillClient
}

// fullDiskContent is the content of the file with seed: random, except
// that every fifth file begins with half of the file before it (its
// chunks are shared).
func fullDiskContent(seed uint64, size int) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, 77))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if seed%5 == 0 && seed > 0 {
		copy(b, fullDiskContent(seed-1, size)[:size/2])
	}
	return b
}

func fillClient(args []string) error {
	dir := args[0]
	seed, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return err
	}
	for _, a := range args[2:] {
		var sizes []int
		for _, f := range strings.Split(a, ",") {
			size, err := strconv.Atoi(f)
			if err != nil {
				return err
			}
			sizes = append(sizes, size)
		}
		for i := 0; ; i, seed = i+1, seed+1 {
			size := sizes[i%len(sizes)]
			name := fmt.Sprintf("d%d/f%d", seed/3%3, seed)
			acked, op, err := writeFile(filepath.Join(dir, name), fullDiskContent(seed, size))
			if err == nil {
				fmt.Println("stored", name, size, seed)
				continue
			}
			if !errors.Is(err, syscall.ENOSPC) {
				return fmt.Errorf("%s %s: %w (want ENOSPC)", op, name, err)
			}
			fmt.Println("enospc", name, size, seed, acked, op)
			seed++
			break
		}
	}
	return nil
}

// writeFile writes b to a new file at path in 64 KiB writes and closes
// it, and says how far it got.
func writeFile(path string, b []byte) (acked int, op string, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, "open", err
	}
	for acked < len(b) {
		n, err := f.Write(b[acked:min(len(b), acked+64<<10)])
		acked += n
		if err != nil {
			f.Close()
			return acked, "write", err
		}
	}
	return acked, "close", f.Close()
}

// fillFile is a file the fill client wrote.
type fillFile struct {
	name  string
	size  int
	seed  uint64
	acked int // for a failed one
}

// runFill runs the fill client and checks what it left: every stored file
// reads back whole; a file whose writing failed is gone or holds a prefix
// of its content no longer than what was written.
func runFill(t *testing.T, m *mount, seed uint64, sizes ...string) (stored, failed []fillFile) {
	t.Helper()
	out := runClientOK(t, "fill", append([]string{m.mnt, fmt.Sprint(seed)}, sizes...)...)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var f fillFile
		var kind, op string
		if n, _ := fmt.Sscan(sc.Text(), &kind, &f.name, &f.size, &f.seed, &f.acked, &op); n < 4 {
			continue
		}
		want := fullDiskContent(f.seed, f.size)
		got, err := os.ReadFile(m.path(f.name))
		switch kind {
		case "stored":
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("stored %s reads back %d bytes, not its %d (%v)", f.name, len(got), f.size, err)
			}
			stored = append(stored, f)
		case "enospc":
			t.Logf("%s: ENOSPC at %s after %d of %d bytes; %d bytes visible", f.name, op, f.acked, f.size, len(got))
			if err != nil && !os.IsNotExist(err) {
				t.Fatalf("read %s after its ENOSPC: %v", f.name, err)
			}
			if len(got) > f.acked+64<<10 || !bytes.Equal(got, want[:len(got)]) {
				t.Fatalf("%s after its ENOSPC: %d bytes that are not what was written (%d acknowledged)", f.name, len(got), f.acked)
			}
			failed = append(failed, f)
		}
	}
	return stored, failed
}

// TestFullDisk: with the store on a small filesystem filled through the
// mount and then to the last byte, writes fail with ENOSPC and leave no
// wrong bytes; rm, rmdir, rename over a file and kvfs rm work, also after
// a remount on the still-full disk; and after removing files, new files
// are written and read back. The harness checks the store at cleanup.
func TestFullDisk(t *testing.T) {
	for _, kind := range []string{"tmpfs", "ext4"} {
		t.Run(kind, func(t *testing.T) { testFullDiskMount(t, kind) })
	}
}

func testFullDiskMount(t *testing.T, kind string) {
	// Small chunks: a removal changes many chunk records, so many index
	// pages.
	m, disk, logFile := newSmallFSMount(t, kind, 24<<20, "--chunk-size", "4KiB")
	sh(t, fmt.Sprintf("mkdir %[1]s/d0 %[1]s/d1 %[1]s/d2", m.mnt))
	runClientOK(t, "engine", m.path("d0"), "whole", "300")

	// Fill the disk through the mount, then to the last byte beside it.
	stored, failed := runFill(t, m, 1, "1048576,300000,60000", "20000", "3000")
	t.Logf("%d files stored, %d writes failed with ENOSPC", len(stored), len(failed))
	if len(stored) < 30 || len(failed) == 0 {
		t.Fatalf("%d files stored, %d failed: the disk did not fill as planned", len(stored), len(failed))
	}
	filler := filepath.Join(disk, "filler")
	testutil.Fill(t, filler)
	if s, f := runFill(t, m, 1000, "100000"); len(s) != 0 || len(f) != 1 {
		t.Fatalf("on the full disk: %d stored, %d failed", len(s), len(f))
	}
	// The failed writers closed their files: no spool is left.
	if ents, err := os.ReadDir(filepath.Join(m.store, "spool")); err != nil || len(ents) != 0 {
		t.Fatalf("spool after the failed writes: %d files (%v)", len(ents), err)
	}

	// Removals of every kind on the full disk, refilled before each.
	var big []fillFile
	var byDir [3][]fillFile
	for _, f := range stored {
		// Big files outside d1 (which goes whole) for rm and kvfs rm.
		d := f.name[1] - '0'
		if f.size == 1<<20 && d != 1 {
			big = append(big, f)
		} else {
			byDir[d] = append(byDir[d], f)
		}
	}
	gone := map[string]bool{}
	for _, f := range byDir[1] {
		gone[f.name] = true
	}
	if len(big) < 6 || len(byDir[0]) < 1 || len(byDir[2]) < 3 {
		t.Fatalf("not the files planned: %d big, %d in d0, %d in d2", len(big), len(byDir[0]), len(byDir[2]))
	}
	testutil.Fill(t, filler)
	sh(t, fmt.Sprintf("rm %s %s", m.path(big[0].name), m.path("d0/snap-300.mlxkv")))
	testutil.Fill(t, filler)
	sh(t, fmt.Sprintf("rm -r %[1]s/d1/* && rmdir %[1]s/d1", m.mnt))
	testutil.Fill(t, filler)
	sh(t, fmt.Sprintf("mv %s %s", m.path(byDir[2][0].name), m.path(byDir[2][1].name)))
	testutil.Fill(t, filler)
	kvfs(t, "rm", m.store, big[1].name)
	gone[big[0].name], gone[big[1].name], gone[byDir[2][0].name], gone[byDir[2][1].name] = true, true, true, true

	// Remount on the full disk, with the index as an older kvfs left it
	// (grown sparse: its free pages hold no space); remove more.
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	testutil.SparsifyIndex(t, filepath.Join(m.store, "kvfs.db"))
	testutil.Fill(t, filler)
	m.start(t, "--log-file", logFile)
	moved := byDir[2][0]
	got, err := os.ReadFile(m.path(byDir[2][1].name))
	if err != nil || !bytes.Equal(got, fullDiskContent(moved.seed, moved.size)) {
		t.Fatalf("the file renamed over another does not read back after the remount (%v)", err)
	}
	for _, f := range []fillFile{byDir[0][0], byDir[2][2]} {
		testutil.Fill(t, filler)
		sh(t, "rm "+m.path(f.name))
		gone[f.name] = true
	}
	testutil.Fill(t, filler)
	kvfs(t, "rm", m.store, big[2].name)
	gone[big[2].name] = true
	// Emptying a file makes room too (truncate(2) by path).
	testutil.Fill(t, filler)
	if err := os.Truncate(m.path(big[3].name), 0); err != nil {
		t.Fatalf("truncate on a full disk: %v", err)
	}
	if fi, err := os.Stat(m.path(big[3].name)); err != nil || fi.Size() != 0 {
		t.Fatalf("truncated %s: %v", big[3].name, err)
	}
	gone[big[3].name] = true

	// The removed files' space takes new files (once the index has
	// allocated the holes that the older kvfs left).
	sh(t, fmt.Sprintf("rm %s %s", m.path(big[4].name), m.path(big[5].name)))
	gone[big[4].name], gone[big[5].name] = true, true
	src := t.TempDir()
	for i := range 3 {
		p := filepath.Join(src, fmt.Sprint(i))
		randFile(t, p, 100_000+i*1000, uint64(500+i))
		sh(t, fmt.Sprintf("cp %s %s && cmp %s %s", p, m.path(fmt.Sprint("again", i)), p, m.path(fmt.Sprint("again", i))))
	}
	for _, f := range stored {
		if gone[f.name] {
			continue
		}
		if got, err := os.ReadFile(m.path(f.name)); err != nil || !bytes.Equal(got, fullDiskContent(f.seed, f.size)) {
			t.Fatalf("%s does not read back after the full disk (%v)", f.name, err)
		}
	}
}
