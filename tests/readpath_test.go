//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func init() {
	// holdopen FILE: open FILE read-only and answer commands from stdin,
	// one per line, with the size and sha256 of what it read: "read" reads
	// the whole file (its fstat size) through the open descriptor, "pread
	// OFF N" reads N bytes at OFF, "map" maps the file (MAP_SHARED) and
	// hashes the mapping.
	clients["holdopen"] = func(args []string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Println("open")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			var b []byte
			var off, n int64
			switch cmd := sc.Text(); {
			case strings.HasPrefix(cmd, "pread "):
				if _, err := fmt.Sscan(cmd[len("pread "):], &off, &n); err != nil {
					return err
				}
				b = make([]byte, n)
				k, err := f.ReadAt(b, off)
				if err != nil && err != io.EOF {
					return err
				}
				b = b[:k]
			case cmd == "read":
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				b = make([]byte, fi.Size())
				n, err := f.ReadAt(b, 0)
				if err != nil && err != io.EOF {
					return err
				}
				b = b[:n]
			case cmd == "map":
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
				if err != nil {
					return err
				}
				b = append([]byte(nil), m...)
				syscall.Munmap(m)
			default:
				return fmt.Errorf("holdopen: unknown command %q", cmd)
			}
			sum := sha256.Sum256(b)
			fmt.Printf("%d %s\n", len(b), hex.EncodeToString(sum[:]))
		}
		return sc.Err()
	}
}

// holder is a holdopen client process.
type holder struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startHolder(t *testing.T, path string) *holder {
	t.Helper()
	cmd := client("holdopen", path)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if line, err := h.out.ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("holdopen %s: %q %v", path, line, err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	return h
}

// ask sends a command and returns the answer: "SIZE SHA256".
func (h *holder) ask(t *testing.T, cmd string) string {
	t.Helper()
	fmt.Fprintln(h.in, cmd)
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("holdopen %s: %v", cmd, err)
	}
	return strings.TrimSpace(line)
}

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return fmt.Sprintf("%d %s", len(b), hex.EncodeToString(s[:]))
}

// TestInPlaceRewriteCoherent: the kernel keeps one page cache per file,
// shared by every open handle. A file rewritten in place (cp over it: an
// O_TRUNC open, writes, close) must read as the new content through a
// descriptor opened before the rewrite, through one opened after, through
// a mapping and through a fresh open, whatever order they read in: a
// handle that went on reading the old version would put old bytes into
// the pages that the others read.
func TestInPlaceRewriteCoherent(t *testing.T) {
	m := newMount(t)
	dir := t.TempDir()
	const size = 3<<20 + 12345
	var vs [4][]byte
	for i := range vs {
		vs[i] = randFile(t, filepath.Join(dir, fmt.Sprint(i)), size, uint64(100+i))
	}
	f := m.path("f")
	cp := func(i int) { sh(t, fmt.Sprintf("cp %s %s", filepath.Join(dir, fmt.Sprint(i)), f)) }
	cp(0)
	a := startHolder(t, f) // opened at version 0, has read nothing
	cp(1)
	b := startHolder(t, f) // opened at version 1
	if got := a.ask(t, "read"); got != sumOf(vs[1]) {
		t.Fatalf("descriptor opened before the rewrite read %s, want version 1 (%s); version 0 is %s", got, sumOf(vs[1]), sumOf(vs[0]))
	}
	if got := b.ask(t, "read"); got != sumOf(vs[1]) {
		t.Fatalf("descriptor opened after the rewrite read %s, want version 1 (%s)", got, sumOf(vs[1]))
	}
	if got := a.ask(t, "map"); got != sumOf(vs[1]) {
		t.Fatalf("mapping read %s, want version 1", got)
	}
	cp(2)
	if got := b.ask(t, "map"); got != sumOf(vs[2]) {
		t.Fatalf("mapping after the second rewrite read %s, want version 2 (%s)", got, sumOf(vs[2]))
	}
	if got := a.ask(t, "read"); got != sumOf(vs[2]) {
		t.Fatalf("old descriptor after the second rewrite read %s, want version 2", got)
	}
	got, err := os.ReadFile(f)
	if err != nil || sumOf(got) != sumOf(vs[2]) {
		t.Fatalf("fresh read after the second rewrite: %s %v, want version 2", sumOf(got), err)
	}
	// A rename over the name leaves the open descriptors on the old file,
	// which keeps the content it had (version 2), as on any disk.
	sh(t, fmt.Sprintf("cp %s %s && mv %s %s", filepath.Join(dir, "3"), m.path("g"), m.path("g"), f))
	if got := a.ask(t, "read"); got != sumOf(vs[2]) {
		t.Fatalf("descriptor of a file renamed over read %s, want its own content (version 2)", got)
	}
	if got, err := os.ReadFile(f); err != nil || sumOf(got) != sumOf(vs[3]) {
		t.Fatalf("the new file under the name: %s %v, want version 3", sumOf(got), err)
	}
}

// TestReadWhileAppending: a reader that opened a file before a writer
// appends to it (O_APPEND) reads the appended bytes, which stat already
// counts; a reader that opens while the writer has the file open can map
// it. Before, the reader got the shorter committed version: its short
// reply was end of file to the kernel, which shrank the file's size, and
// the writer's next O_APPEND write landed inside the first append,
// corrupting the file it then fsynced and closed without an error.
func TestReadWhileAppending(t *testing.T) {
	m := newMount(t)
	p := m.path("append.bin")
	a := randFile(t, filepath.Join(t.TempDir(), "a"), 100_000, 21)
	if err := os.WriteFile(p, a, 0o644); err != nil {
		t.Fatal(err)
	}
	r := startHolder(t, p) // opened before the writer
	if got := r.ask(t, "pread 0 4096"); got != sumOf(a[:4096]) {
		t.Fatalf("first page: %s", got)
	}
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	b := bytes.Repeat([]byte("B"), 100_000)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, a...), b...)
	if got := r.ask(t, "pread 196608 4096"); got != sumOf(want[196608:]) {
		t.Fatalf("reader of the last appended page: %s, want %s", got, sumOf(want[196608:]))
	}
	mapper := startHolder(t, p) // opened while the writer has the file open
	if got := mapper.ask(t, "map"); got != sumOf(want) {
		t.Fatalf("mapping of a file being written: %s, want %s", got, sumOf(want))
	}
	c := bytes.Repeat([]byte("C"), 1000)
	if _, err := w.Write(c); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want = append(want, c...)
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the appends: %d bytes (%v), want %d: the second append went to offset %d", len(got), err, len(want), bytes.IndexByte(got, 'C'))
	}
	if got := r.ask(t, "read"); got != sumOf(want) {
		t.Fatalf("early reader after close: %s, want %s", got, sumOf(want))
	}
	if got := mapper.ask(t, "map"); got != sumOf(want) {
		t.Fatalf("mapping after close: %s, want %s", got, sumOf(want))
	}
}

// TestWholeViewFollowsCommits: /.kvfs/whole/<path> shows the newest
// version of the file at path, after in-place rewrites and after the name
// was renamed away and created again; it never fails for a name that
// exists.
func TestWholeViewFollowsCommits(t *testing.T) {
	m := newMount(t)
	view := m.path(".kvfs/whole/w.txt")
	for i, content := range []string{"version one\n", "version two, longer\n", "3\n"} {
		switch i {
		case 2:
			if err := os.Rename(m.path("w.txt"), m.path("w2.txt")); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(m.path("w.txt"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(view)
		if err != nil || string(got) != content {
			t.Fatalf("version %d through the view: %q %v, want %q", i+1, got, err, content)
		}
		fi, err := os.Stat(view)
		if err != nil || fi.Size() != int64(len(content)) {
			t.Fatalf("version %d: stat of the view: %v %v, want size %d", i+1, fi, err, len(content))
		}
	}
	// Rewrites in a tight loop, each read through the view at once: the
	// kernel's entry of the view (kept up to a jiffy) must not outlive the
	// commit (notifyViews).
	for i := range 300 {
		content := fmt.Sprintf("rewrite %d %s\n", i, strings.Repeat("x", i%7))
		if err := os.WriteFile(m.path("w3.txt"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(m.path(".kvfs/whole/w3.txt")); err != nil || string(got) != content {
			t.Fatalf("rewrite %d through the view: %q %v, want %q", i, got, err, content)
		}
		if fi, err := os.Stat(m.path(".kvfs/whole/w3.txt")); err != nil || fi.Size() != int64(len(content)) {
			t.Fatalf("rewrite %d: stat of the view: %v %v, want size %d", i, fi, err, len(content))
		}
	}
	// The file renamed away is seen under its new name.
	if got, err := os.ReadFile(m.path(".kvfs/whole/w2.txt")); err != nil || string(got) != "version two, longer\n" {
		t.Fatalf("renamed file through the view: %q %v", got, err)
	}
	// A directory renamed above a file, and another made in its place.
	sh(t, fmt.Sprintf("mkdir %[1]s/d && echo old > %[1]s/d/f && cat %[1]s/.kvfs/whole/d/f >/dev/null && mv %[1]s/d %[1]s/d2 && mkdir %[1]s/d && echo new > %[1]s/d/f", m.mnt))
	for path, want := range map[string]string{"d/f": "new\n", "d2/f": "old\n"} {
		if got, err := os.ReadFile(m.path(".kvfs/whole/" + path)); err != nil || string(got) != want {
			t.Errorf("%s through the view after a directory rename: %q %v, want %q", path, got, err, want)
		}
	}
	sh(t, "rm -r "+m.path("d2"))
	if got, err := os.ReadFile(m.path(".kvfs/whole/d/f")); err != nil || string(got) != "new\n" {
		t.Errorf("d/f through the view after the old directory went: %q %v", got, err)
	}
}
