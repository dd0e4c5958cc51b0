//go:build linux

package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// Names are bytes: a name that is not valid UTF-8 must keep its content,
// list as the same bytes, and survive a remount, through the mount and
// through the control socket.

func init() {
	clients["names"] = namesClient
}

// oddNames are the names the test files are written under: "caf\xe9.mlxkv",
// one name per byte 0x80..0xff, and a 255-byte name that is not UTF-8.
func oddNames() []string {
	names := []string{"caf\xe9.mlxkv", strings.Repeat("\xfe", 254) + "\xe9"}
	for c := 0x80; c <= 0xff; c++ {
		names = append(names, "n"+string([]byte{byte(c)})+".bin")
	}
	return names
}

// Names of the files that are renamed to an odd name before (renamed) or
// while (renamedOpen) they are written.
const (
	renamedName     = "renamed\xc3\x28"
	renamedOpenName = "open\xff"
)

// oddContent is what the file called name holds: 'A' * 100000 for the
// issue's reproducer, and bytes derived from the name otherwise.
func oddContent(name string) []byte {
	if name == "caf\xe9.mlxkv" {
		return bytes.Repeat([]byte("A"), 100000)
	}
	var b []byte
	for i := 0; len(b) < 70000+len(name)*37; i++ {
		b = fmt.Appendf(b, "%x:%d\n", name, i)
	}
	return b
}

// namesClient OP DIR: "write" writes every odd name in DIR, including one
// renamed to its name before and one while it is written; "verify" checks
// that os.ReadDir lists exactly those names' bytes and each reads back
// (stat size and content); "remove" removes them all.
func namesClient(args []string) error {
	op, dir := args[0], args[1]
	all := append(oddNames(), renamedName, renamedOpenName)
	switch op {
	case "write":
		for _, name := range oddNames() {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				return err
			}
			if _, err := f.Write(oddContent(name)); err != nil {
				return fmt.Errorf("write %q: %w", name, err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("close %q: %w", name, err)
			}
		}
		// Renamed, then rewritten.
		tmp := filepath.Join(dir, "tmp1")
		if err := os.WriteFile(tmp, []byte("old content"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, renamedName)); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, renamedName), oddContent(renamedName), 0o644); err != nil {
			return fmt.Errorf("rewrite %q: %w", renamedName, err)
		}
		// Renamed while open for writing, written after the rename.
		want := oddContent(renamedOpenName)
		f, err := os.Create(filepath.Join(dir, "tmp2"))
		if err != nil {
			return err
		}
		if _, err := f.Write(want[:1000]); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(dir, "tmp2"), filepath.Join(dir, renamedOpenName)); err != nil {
			return err
		}
		if _, err := f.Write(want[1000:]); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %q: %w", renamedOpenName, err)
		}
		return nil
	case "verify":
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var got, want [][]byte
		for _, e := range ents {
			got = append(got, []byte(e.Name()))
		}
		for _, name := range all {
			want = append(want, []byte(name))
		}
		slices.SortFunc(got, bytes.Compare)
		slices.SortFunc(want, bytes.Compare)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			return fmt.Errorf("readdir lists %q, want %q", got, want)
		}
		for _, name := range all {
			p := filepath.Join(dir, name)
			want := oddContent(name)
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			if fi.Size() != int64(len(want)) {
				return fmt.Errorf("stat %q: size %d, want %d", name, fi.Size(), len(want))
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if !bytes.Equal(b, want) {
				return fmt.Errorf("%q reads back %d bytes that differ from the %d written", name, len(b), len(want))
			}
		}
		return nil
	case "remove":
		for _, name := range all {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(ents) != 0 {
			return fmt.Errorf("%d entries left after removing every file", len(ents))
		}
		return nil
	}
	return fmt.Errorf("names: unknown op %q", op)
}

// TestNonUTF8Names writes files whose names are not valid UTF-8 through the
// mount from another process, and reads them back by name, in a listing,
// after a remount and through the control socket; then removes them.
func TestNonUTF8Names(t *testing.T) {
	m := newMount(t)
	dir := m.path("d\xe9\xff")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runClientOK(t, "names", "write", dir)
	runClientOK(t, "names", "verify", dir)

	// The control socket sees the same bytes: get, and ls escapes them.
	out := filepath.Join(t.TempDir(), "out")
	for _, name := range []string{"caf\xe9.mlxkv", renamedOpenName} {
		kvfs(t, "get", "--verify", m.store, "d\xe9\xff/"+name, out)
		if got, _ := os.ReadFile(out); !bytes.Equal(got, oddContent(name)) {
			t.Fatalf("kvfs get %q: %d bytes differ from the %d written", name, len(got), len(oddContent(name)))
		}
	}
	ls := kvfs(t, "ls", m.store, "d\xe9\xff")
	for _, name := range append(oddNames(), renamedName, renamedOpenName) {
		if !strings.Contains(ls, strconv.Quote(name)+"\n") {
			t.Fatalf("kvfs ls lacks %s:\n%s", strconv.Quote(name), ls)
		}
	}
	if root := kvfs(t, "ls", m.store); root != `"d\xe9\xff"/`+"\n" {
		t.Fatalf("kvfs ls of the root: %q", root)
	}

	// Files put through the socket read back through the mount and the
	// socket, under names of every kind.
	sock := []string{"s\x80/caf\xe9.mlxkv", "s\x80/" + strings.Repeat("\xfd", 255), "s\x80/plain"}
	for _, p := range sock {
		src := filepath.Join(t.TempDir(), "src")
		os.WriteFile(src, oddContent(p), 0o644)
		if out := kvfs(t, "put", m.store, src, p); !strings.HasPrefix(out, displayPath(p)+": ") {
			t.Fatalf("kvfs put %q: %s", p, out)
		}
		if got, err := os.ReadFile(m.path(p)); err != nil || !bytes.Equal(got, oddContent(p)) {
			t.Fatalf("the mount reads %q put through the socket: %d bytes, %v", p, len(got), err)
		}
	}
	ents, err := os.ReadDir(m.path("s\x80"))
	if err != nil || len(ents) != 3 {
		t.Fatalf("readdir of the socket's directory: %v %v", ents, err)
	}
	for i, want := range []string{"caf\xe9.mlxkv", "plain", strings.Repeat("\xfd", 255)} { // byte order
		if ents[i].Name() != want {
			t.Fatalf("readdir entry %d is %q, want %q", i, ents[i].Name(), want)
		}
	}
	if ls := kvfs(t, "ls", "-l", m.store, "s\x80"); !strings.Contains(ls, " "+strconv.Quote("caf\xe9.mlxkv")+"\n") || !strings.Contains(ls, " plain\n") {
		t.Fatalf("kvfs ls -l:\n%s", ls)
	}

	// A remount reads the same names and bytes from the index.
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	m.start(t)
	runClientOK(t, "names", "verify", dir)
	for _, p := range sock {
		kvfs(t, "get", m.store, p, out)
		if got, _ := os.ReadFile(out); !bytes.Equal(got, oddContent(p)) {
			t.Fatalf("kvfs get %q after remount: %d bytes", p, len(got))
		}
		kvfs(t, "rm", m.store, p)
	}
	runClientOK(t, "names", "remove", dir)
	if ents, err := os.ReadDir(m.path("s\x80")); err != nil || len(ents) != 0 {
		t.Fatalf("after kvfs rm: %v %v", ents, err)
	}
}

// displayPath is how kvfs prints a path: quoted when not UTF-8.
func displayPath(p string) string {
	if utf8.ValidString(p) {
		return p
	}
	return strconv.Quote(p)
}

// TestNameTooLong: every operation on a name of more than 255 bytes fails
// with ENAMETOOLONG, through the mount as in a plain directory (which
// proves the expectation), and kvfs put through the socket refuses it.
func TestNameTooLong(t *testing.T) {
	m := newMount(t)
	long := strings.Repeat("n", 256)
	for _, dir := range []string{t.TempDir(), m.mnt} {
		ok := filepath.Join(dir, "ok")
		if err := os.WriteFile(ok, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, long)
		ops := map[string]func() error{
			"create":      func() error { return os.WriteFile(p, []byte("x"), 0o644) },
			"mkdir":       func() error { return os.Mkdir(p, 0o755) },
			"stat":        func() error { _, err := os.Stat(p); return err },
			"unlink":      func() error { return syscall.Unlink(p) },
			"rmdir":       func() error { return syscall.Rmdir(p) },
			"chmod":       func() error { return os.Chmod(p, 0o600) },
			"rename":      func() error { return os.Rename(ok, p) },
			"rename from": func() error { return os.Rename(p, ok) },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, syscall.ENAMETOOLONG) {
				t.Errorf("%s: %s of a 256-byte name: %v, want ENAMETOOLONG", dir, name, err)
			}
		}
	}
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("x"), 0o644)
	out, err := exec.Command(kvfsBin, "put", m.store, src, "/"+long).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "too long") {
		t.Errorf("kvfs put of a 256-byte name: %v %s", err, out)
	}
}
