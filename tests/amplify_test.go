//go:build linux

package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// Bounds on what one request can cost the daemon (issue 8, items 3 and
// 11): extended-attribute limits, snapshots over the index caps stored as
// plain files, and /.kvfs/whole views parsed once.

func init() {
	clients["xattrlimits"] = xattrLimitsClient
	clients["viewstat"] = viewStatClient
}

// xattrLimitsClient FILE: a value over 64 KiB is E2BIG; 64 KiB values are
// refused with ENOSPC once the file's total is reached; names are refused
// with ENOSPC before their list outgrows listxattr's buffer, which then
// lists them all. Prints "values N names M".
func xattrLimitsClient(args []string) error {
	f := args[0]
	if err := syscall.Setxattr(f, "user.big", make([]byte, 64<<10+1), 0); !errors.Is(err, syscall.E2BIG) {
		return fmt.Errorf("setxattr of 64 KiB + 1: %v, want E2BIG", err)
	}
	val := bytes.Repeat([]byte{'v'}, 64<<10)
	values := 0
	for ; values < 100; values++ {
		err := syscall.Setxattr(f, fmt.Sprintf("user.v%d", values), val, 0)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return fmt.Errorf("setxattr value %d: %w", values, err)
		}
	}
	if values == 0 || values == 100 {
		return fmt.Errorf("%d values of 64 KiB accepted, want a total limit that lets some in", values)
	}
	got := make([]byte, 64<<10)
	if n, err := syscall.Getxattr(f, "user.v0", got); err != nil || n != len(val) || !bytes.Equal(got, val) {
		return fmt.Errorf("getxattr user.v0: %d bytes, %v", n, err)
	}
	for i := 0; i < values; i++ {
		if err := syscall.Removexattr(f, fmt.Sprintf("user.v%d", i)); err != nil {
			return fmt.Errorf("removexattr: %w", err)
		}
	}
	names := 0
	for ; names < 6000; names++ {
		err := syscall.Setxattr(f, fmt.Sprintf("user.%095d", names), nil, 0)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return fmt.Errorf("setxattr name %d: %w", names, err)
		}
	}
	if names == 6000 {
		return errors.New("6000 names of 100 bytes accepted")
	}
	size, err := syscall.Listxattr(f, nil)
	if err != nil {
		return fmt.Errorf("listxattr size: %w", err)
	}
	buf := make([]byte, size)
	n, err := syscall.Listxattr(f, buf)
	if err != nil {
		return fmt.Errorf("listxattr: %w", err)
	}
	listed := 0
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(s, "user.0") {
			listed++
		}
	}
	if listed != names {
		return fmt.Errorf("listxattr lists %d of the %d names set", listed, names)
	}
	fmt.Printf("values %d names %d\n", values, names)
	return nil
}

// TestXattrLimitsMount: ext4-like limits through the mount, as the
// file's unprivileged owner on an allow_other mount.
func TestXattrLimitsMount(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	dir := m.path("u")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(u.uid), int(u.gid)); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "f")
	u.shOK(t, "echo x > "+f)
	out, err := u.client(t, "xattrlimits", f).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := fmt.Sprintf("values %d names %d\n", store.MaxXattrBytes/(64<<10+8), store.MaxXattrNames/101)
	if string(out) != want {
		t.Fatalf("client: %q, want %q", out, want)
	}
}

// bigTokenSnapshot writes a valid whole-layout snapshot of a 4-token cache
// whose header lists n tokens.
func bigTokenSnapshot(t testing.TB, path string, n int) []byte {
	t.Helper()
	h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(4, 1))
	h.Tokens = snapgen.Tokens(n, 2)
	if _, _, err := (&mlx.Writer{}).Write(path, h, tensors); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBigTokenSnapshotPlain: a snapshot whose token list is over the
// daemon's cap, copied in by an unprivileged user, is stored as a plain
// file (logged, with the cap), and reads back byte-exact from its name and
// from /.kvfs/whole.
func TestBigTokenSnapshotPlain(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	src := filepath.Join(u.home, "big.mlxkv")
	want := bigTokenSnapshot(t, src, store.DefaultMaxSnapshotTokens+1)
	defer os.Remove(src)
	os.Chown(src, int(u.uid), int(u.gid))
	if err := os.Chmod(m.mnt, 0o777); err != nil {
		t.Fatal(err)
	}
	// cp keeps the writer's holes (the spool becomes a sparse pack),
	// which the store check at cleanup must accept.
	u.shOK(t, fmt.Sprintf("cp --sparse=always %s %s", src, m.path("big.mlxkv")))
	kind := make([]byte, 64)
	n, err := syscall.Getxattr(m.path("big.mlxkv"), "user.kvfs.kind", kind)
	if err != nil || string(kind[:n]) != "plain" {
		t.Fatalf("user.kvfs.kind: %q, %v; want plain", kind[:n], err)
	}
	u.shOK(t, fmt.Sprintf("cmp %s %s && cmp %s %s", src, m.path("big.mlxkv"), src, m.path(".kvfs/whole/big.mlxkv")))
	got, err := os.ReadFile(m.path("big.mlxkv"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	line := fmt.Sprintf("%d tokens, over the cap of %d", store.DefaultMaxSnapshotTokens+1, store.DefaultMaxSnapshotTokens)
	if !bytes.Contains(log, []byte("storing snapshot as a plain file")) || !bytes.Contains(log, []byte(line)) ||
		!bytes.Contains(log, []byte("big.mlxkv")) {
		t.Fatalf("the daemon's log does not say that big.mlxkv was stored as plain (%q):\n%s", line, log)
	}
}

// viewStatClient PATH SIZE: stat PATH, check its size, and read it whole.
func viewStatClient(args []string) error {
	fi, err := os.Stat(args[0])
	if err != nil {
		return err
	}
	if fmt.Sprint(fi.Size()) != args[1] {
		return fmt.Errorf("%s: size %d, want %s", args[0], fi.Size(), args[1])
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	if fmt.Sprint(len(b)) != args[1] {
		return fmt.Errorf("%s: read %d bytes, want %s", args[0], len(b), args[1])
	}
	return nil
}

// TestWholeViewParsedOnce: 8 processes stat and read the /.kvfs/whole view
// of a whole-layout and of a blocks-layout snapshot at once, twice over;
// the daemon parses each header once (its kvfs_view_parses_total
// counter).
func TestWholeViewParsedOnce(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	tokens := snapgen.Tokens(64, 3)
	if err := snapgen.Tiny.WriteFile(m.path("whole.mlxkv"), tokens); err != nil {
		t.Fatal(err)
	}
	h, tensors := snapgen.Tiny.Snapshot(tokens)
	if err := os.Mkdir(m.path("b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 4096}).Write(m.path("b/blocks.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}
	whole, err := os.Stat(m.path("whole.mlxkv"))
	if err != nil {
		t.Fatal(err)
	}
	misses := metric(t, addr, "kvfs_view_cache_misses_total")
	for round := 0; round < 2; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 8; i++ {
			for _, p := range []string{".kvfs/whole/whole.mlxkv", ".kvfs/whole/b/blocks.mlxkv"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if out, err := client("viewstat", m.path(p), fmt.Sprint(whole.Size())).CombinedOutput(); err != nil {
						errs <- fmt.Errorf("%s: %v\n%s", p, err, out)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	// Every lookup, stat and open that did not find the view resolved
	// is a miss; the first requests of each snapshot share one.
	if got := metric(t, addr, "kvfs_view_cache_misses_total") - misses; got != 2 {
		t.Errorf("%d view cache misses for 2 snapshots viewed by 8 processes twice, want 2", got)
	}
	if got := metric(t, addr, "kvfs_view_parses_total"); got != 2 {
		t.Errorf("%d header parses for 2 snapshots viewed by 8 processes twice, want 2", got)
	}
}
