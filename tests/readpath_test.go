package tests

import (
	"bufio"
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
	// one per line, with the sha256 of what it read: "read" reads the
	// whole file through the open descriptor, "map" maps it (MAP_SHARED)
	// and hashes the mapping.
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
			switch sc.Text() {
			case "read":
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
			case "map":
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
				return fmt.Errorf("holdopen: unknown command %q", sc.Text())
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
