//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// Tests of writes through the mount with and without the kernel's
// writeback cache (-o writeback_cache): with it, write(2) and stores
// through a mapping fill the page cache, the kernel reads the rest of a
// partly written page through the write handle, owns the file's size and
// times, and sends dirty pages at writeback, close and fsync. Each test
// drives a writer process and reader processes and compares what they
// see, and what is stored after a remount, with a model of the file.

// bothCaches runs fn on a fresh mount without and with the writeback
// cache.
func bothCaches(t *testing.T, fn func(t *testing.T, m *mount)) {
	for _, c := range []struct {
		name string
		args []string
	}{{"default", nil}, {"writeback_cache", []string{"-o", "writeback_cache"}}} {
		t.Run(c.name, func(t *testing.T) { fn(t, newMount(t, c.args...)) })
	}
}

// fileWriter is a holdwrite client process and the model of the file it
// writes.
type fileWriter struct {
	cmd   *holder
	model []byte
}

func startWriter(t *testing.T, path, flags string, model []byte) *fileWriter {
	t.Helper()
	cmd := client("holdwrite", path, flags)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	h := &holder{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if line, err := h.out.ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("holdwrite %s: %q %v", path, line, err)
	}
	return &fileWriter{cmd: h, model: model}
}

// stop ends a holdopen or holdwrite process (closing what it holds).
func (h *holder) stop(t *testing.T) {
	t.Helper()
	h.in.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("%v: %v", h.cmd.Args, err)
	}
}

// do runs a writer command and applies it to the model.
func (w *fileWriter) do(t *testing.T, c string) {
	t.Helper()
	if got := w.cmd.ask(t, c); got != "ok" {
		t.Fatalf("holdwrite %s: %q", c, got)
	}
	f := strings.Fields(c)
	var off, n int
	switch f[0] {
	case "pwrite", "mset":
		fmt.Sscan(f[1], &off)
		w.write(off, []byte(f[2]))
	case "fill":
		fmt.Sscan(f[1], &off)
		fmt.Sscan(f[2], &n)
		w.write(off, bytes.Repeat([]byte(f[3][:1]), n))
	case "ftruncate":
		fmt.Sscan(f[1], &n)
		w.truncate(n)
	}
}

func (w *fileWriter) write(off int, b []byte) {
	if end := off + len(b); end > len(w.model) {
		w.truncate(end)
	}
	copy(w.model[off:], b)
}

func (w *fileWriter) truncate(n int) {
	if n <= len(w.model) {
		w.model = w.model[:n:n]
		return
	}
	w.model = append(w.model, make([]byte, n-len(w.model))...)
}

// check compares what every reader sees with the model: readers opened
// earlier (each reads the size fstat gives, then that many bytes), a
// process that opens the file now, and stat.
func (w *fileWriter) check(t *testing.T, what, path string, readers ...*holder) {
	t.Helper()
	want := sumOf(w.model)
	for i, r := range readers {
		if got := r.ask(t, "read"); got != want {
			t.Fatalf("%s: reader %d read %s, want %s", what, i, got, want)
		}
	}
	r := startHolder(t, path)
	got := r.ask(t, "read")
	r.stop(t)
	if got != want {
		t.Fatalf("%s: a new reader read %s, want %s", what, got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(w.model)) {
		t.Fatalf("%s: stat: %v %v, want size %d", what, fi.Size(), err, len(w.model))
	}
}

// checkStored ends the writer and readers, remounts and compares the
// stored file with the model.
func (w *fileWriter) checkStored(t *testing.T, m *mount, path string, readers ...*holder) {
	t.Helper()
	w.cmd.stop(t)
	for _, r := range readers {
		r.stop(t)
	}
	sh(t, kvfsBin+" unmount "+m.mnt)
	m.start(t)
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, w.model) {
		t.Fatalf("after a remount: %s %v, want %s", sumOf(got), err, sumOf(w.model))
	}
}

// TestWritePartialPages: writes that cover pages in part, through a
// descriptor opened write-only (the kernel reads the rest of each page
// through it when it caches writes), across a page edge, past the end of
// file and past a hole, read by a reader opened before them and by new
// ones, before and after fsync and close, and as stored.
func TestWritePartialPages(t *testing.T) {
	bothCaches(t, func(t *testing.T, m *mount) {
		p := m.path("f")
		base := randFile(t, filepath.Join(t.TempDir(), "base"), 3*4096+100, 31)
		if err := os.WriteFile(p, base, 0o644); err != nil {
			t.Fatal(err)
		}
		r := startHolder(t, p)
		w := startWriter(t, p, "wronly", append([]byte{}, base...))
		for _, c := range []string{"pwrite 5 hello", "pwrite 4090 across-a-page-edge",
			fmt.Sprintf("fill %d 100 z", len(base)-50), fmt.Sprintf("pwrite %d past-a-hole", len(base)+5000)} {
			w.do(t, c)
			w.check(t, c, p, r)
		}
		w.do(t, "fsync")
		w.check(t, "after fsync", p, r)
		w.do(t, "pwrite 8191 x")
		w.do(t, "close")
		w.check(t, "after close", p, r)
		w.checkStored(t, m, p, r)
	})
}

// TestTruncateWhileDirty: truncations of a file with unwritten (dirty)
// writes, by the writer (ftruncate) and by another process (truncate),
// into the middle of a page and to a larger size, followed by more
// writes: the cut bytes never come back, a hole reads as zeros.
func TestTruncateWhileDirty(t *testing.T) {
	bothCaches(t, func(t *testing.T, m *mount) {
		p := m.path("f")
		w := startWriter(t, p, "rdwr,create,trunc", nil)
		r := startHolder(t, p)
		step := func(c string) {
			t.Helper()
			w.do(t, c)
			w.check(t, c, p, r, w.cmd)
		}
		step("fill 0 200000 a")
		step("ftruncate 100001")
		step("pwrite 150000 0123456789")
		if err := os.Truncate(p, 120000); err != nil {
			t.Fatal(err)
		}
		w.truncate(120000)
		w.check(t, "truncate by another process", p, r, w.cmd)
		step("pwrite 130000 xyz")
		step("fsync")
		step("fill 1000 3000 b")
		step("ftruncate 5000")
		step("ftruncate 9000")
		step("pwrite 6000 end")
		w.do(t, "close")
		w.check(t, "after close", p, r)
		w.checkStored(t, m, p, r)
	})
}

// TestMmapWrites: stores through a shared mapping are read by other
// processes at once and stored at fsync, close and unmap, including those
// made after the descriptor was closed (the mapping keeps the file open
// for writing).
func TestMmapWrites(t *testing.T) {
	bothCaches(t, func(t *testing.T, m *mount) {
		p := m.path("f")
		base := randFile(t, filepath.Join(t.TempDir(), "base"), 5*4096+10, 32)
		if err := os.WriteFile(p, base, 0o644); err != nil {
			t.Fatal(err)
		}
		r := startHolder(t, p)
		w := startWriter(t, p, "rdwr", append([]byte{}, base...))
		w.do(t, "map")
		for _, c := range []string{"mset 100 page0", "mset 12285 across-a-page-edge", fmt.Sprintf("mset %d TAILTAILTA", len(base)-10)} {
			w.do(t, c)
			w.check(t, c, p, r, w.cmd)
		}
		w.do(t, "fsync")
		w.check(t, "after fsync", p, r)
		w.do(t, "mset 2000 before-close")
		w.do(t, "close")
		w.check(t, "after close", p, r)
		w.do(t, "mset 3000 after-close")
		w.do(t, "unmap")
		w.check(t, "after unmap", p, r)
		// The last commit comes with the release, which the kernel sends
		// after munmap returns; an fsync of any descriptor makes it
		// durable now.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		w.checkStored(t, m, p, r)
	})
}

// TestWriteThenReadElsewhere: bytes written (not closed, not synced) by
// one process are read by processes that opened the file before and
// after, through read and through a mapping, while the writer appends,
// rewrites and extends; then the writer closes.
func TestWriteThenReadElsewhere(t *testing.T) {
	bothCaches(t, func(t *testing.T, m *mount) {
		p := m.path("f")
		w := startWriter(t, p, "wronly,create,trunc", nil)
		early := startHolder(t, p)
		for i, c := range []string{"fill 0 1048576 a", "pwrite 4000 rewritten", "fill 1048576 3000000 b", "pwrite 10 x"} {
			w.do(t, c)
			w.check(t, c, p, early)
			late := startHolder(t, p)
			got, want := late.ask(t, "map"), sumOf(w.model)
			late.stop(t)
			if got != want {
				t.Fatalf("step %d: mapping read %s, want %s", i, got, want)
			}
		}
		w.do(t, "close")
		w.check(t, "after close", p, early)
		w.checkStored(t, m, p, early)
	})
}

// TestPosixWritebackCache runs go-fuse's POSIX cases (TestPosix) on a
// mount with the writeback cache.
func TestPosixWritebackCache(t *testing.T) {
	for _, name := range posixCases {
		t.Run(name, func(t *testing.T) {
			m := newMount(t, "-o", "writeback_cache")
			posixtest.All[name](t, m.mnt)
		})
	}
}

func init() {
	// bigwrites FILE MIB SECONDS [GEN]: rewrite FILE in place (O_TRUNC)
	// with one write(2) of MIB MiB, again and again for SECONDS. With GEN
	// (a file outside the mount), a counter there goes odd just before
	// each O_TRUNC open and even again once it has returned, so that a
	// reader can tell whether a truncation may have fallen between two of
	// its steps.
	clients["bigwrites"] = func(args []string) error {
		var mib int
		var secs float64
		fmt.Sscan(args[1], &mib)
		fmt.Sscan(args[2], &secs)
		b := bytes.Repeat([]byte{1}, mib<<20)
		var gen *os.File
		var n uint64
		bump := func() error {
			if gen == nil {
				return nil
			}
			n++
			_, err := gen.WriteAt(binary.LittleEndian.AppendUint64(nil, n), 0)
			return err
		}
		if len(args) > 3 {
			var err error
			if gen, err = os.OpenFile(args[3], os.O_RDWR, 0); err != nil {
				return err
			}
			defer gen.Close()
		}
		for end := time.Now().Add(time.Duration(secs * float64(time.Second))); time.Now().Before(end); {
			if err := bump(); err != nil {
				return err
			}
			f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if err := bump(); err != nil {
				return err
			}
			if _, err := f.Write(b); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestStatDuringLargeWrite: with the writeback cache, a stat during a
// write(2) that the kernel sends as many requests never reports a size
// that a read cannot reach (docs/READPATH.md, "stat during a
// multi-request write(2)": without the cache it does, within a second
// here). The file only shrinks at the writer's O_TRUNC open, so a read at
// size-1 that finds end of file, with a stat after it as large and no such
// open begun or under way from before the first stat to after the second
// (the writer's counter, even and unchanged), is the gap.
func TestStatDuringLargeWrite(t *testing.T) {
	m := newMount(t, "-o", "writeback_cache")
	p := m.path("g")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const secs = 3
	genFile := filepath.Join(t.TempDir(), "gen")
	if err := os.WriteFile(genFile, make([]byte, 8), 0o644); err != nil {
		t.Fatal(err)
	}
	gen, err := os.Open(genFile)
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	readGen := func() uint64 {
		var b [8]byte
		if _, err := gen.ReadAt(b[:], 0); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	wr := client("bigwrites", p, "32", fmt.Sprint(secs), genFile)
	wr.Stderr = os.Stderr
	if err := wr.Start(); err != nil {
		t.Fatal(err)
	}
	checks := 0
	for end := time.Now().Add(secs * time.Second); time.Now().Before(end); {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			g := readGen()
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() == 0 {
				continue
			}
			var b [1]byte
			n, err := f.ReadAt(b[:], fi.Size()-1)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			checks++
			if n == 0 {
				after, err := os.Stat(p)
				if g2 := readGen(); err == nil && after.Size() >= fi.Size() && g%2 == 0 && g2 == g {
					f.Close()
					wr.Wait()
					t.Fatalf("stat reported %d bytes, a read at %d found end of file (stat after it: %d)", fi.Size(), fi.Size()-1, after.Size())
				}
			}
		}
		f.Close()
	}
	if err := wr.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d stat and read pairs", checks)
}
