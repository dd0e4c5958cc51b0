//go:build linux

package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

func randFile(t testing.TB, path string, n int, seed uint64) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCpInOut copies files into the mount and back out with cp, in
// separate processes, and compares them byte for byte: empty, small, and
// a 1 GiB sparse file with holes.
func TestCpInOut(t *testing.T) {
	m := newMount(t)
	src := t.TempDir()
	randFile(t, filepath.Join(src, "small"), 100_000, 1)
	if err := os.WriteFile(filepath.Join(src, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(src, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 300 << 20, 700<<20 + 12345} {
		f.WriteAt(bytes.Repeat([]byte{0xab, 0xcd}, 1<<19), off)
	}
	f.Truncate(1 << 30)
	f.Close()
	out := t.TempDir()
	for _, name := range []string{"empty", "small", "sparse"} {
		sh(t, fmt.Sprintf("cp %s %s && cp %s %s && cmp %s %s",
			filepath.Join(src, name), m.path(name), m.path(name), filepath.Join(out, name),
			filepath.Join(src, name), filepath.Join(out, name)))
	}
	ls := sh(t, "ls -ln "+m.mnt)
	for _, want := range []string{" 0 ", " 100000 ", " 1073741824 "} {
		if !strings.Contains(ls, want) {
			t.Errorf("ls -l lacks size%s:\n%s", want, ls)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.mnt, &st); err != nil || st.Blocks == 0 {
		t.Errorf("statfs: %+v %v", st, err)
	}
}

func TestMvRmMkdir(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "f")
	want := randFile(t, src, 300_000, 2)
	sh(t, fmt.Sprintf("mkdir -p %[1]s/a/b && cp %[2]s %[1]s/a/b/f && mv %[1]s/a/b/f %[1]s/a/g && mv %[1]s/a %[1]s/c && rmdir %[1]s/c/b", m.mnt, src))
	got, err := os.ReadFile(m.path("c/g"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after mv: %v", err)
	}
	for _, bad := range []string{"rmdir " + m.path("c"), "rm " + m.path("c/nope"), "mv " + m.path("c") + " " + m.path("c/g/x")} {
		if err := exec.Command("sh", "-c", bad).Run(); err == nil {
			t.Errorf("%q succeeded", bad)
		}
	}
	if err := exec.Command("ln", "-s", "x", m.path("c/link")).Run(); err == nil {
		t.Error("symlink succeeded; kvfs does not support symlinks")
	}
	sh(t, fmt.Sprintf("rm %[1]s/c/g && rmdir %[1]s/c", m.mnt))
	if ents, _ := os.ReadDir(m.mnt); len(ents) != 0 {
		t.Fatalf("left: %v", ents)
	}
	// rename(2) with RENAME_NOREPLACE refuses an existing target.
	os.WriteFile(m.path("x"), []byte("x"), 0o644)
	os.WriteFile(m.path("y"), []byte("y"), 0o644)
	err = renameat2(m.path("x"), m.path("y"), 1)
	if err != syscall.EEXIST {
		t.Errorf("RENAME_NOREPLACE over an existing file: %v", err)
	}
}

func renameat2(from, to string, flags uint) error {
	return renameat2sys(from, to, flags)
}

func TestMmapReader(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "f")
	randFile(t, src, 5<<20+333, 3)
	sh(t, fmt.Sprintf("cp %s %s", src, m.path("f")))
	runClientOK(t, "mmapcmp", m.path("f"), src)
}

// TestConcurrentProcesses: 8 processes write and 8 read at once.
func TestConcurrentProcesses(t *testing.T) {
	m := newMount(t)
	dir := t.TempDir()
	var srcs []string
	for i := 0; i < 8; i++ {
		p := filepath.Join(dir, fmt.Sprint(i))
		b := randFile(t, p, 2<<20, uint64(i))
		copy(b[:1<<20], bytes.Repeat([]byte{byte(i % 2)}, 1<<20)) // shared halves
		os.WriteFile(p, b, 0o644)
		srcs = append(srcs, p)
	}
	sh(t, fmt.Sprintf("cp %s %s", srcs[0], m.path("shared")))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			out, err := exec.Command("sh", "-c", fmt.Sprintf("cp %s %s && cmp %s %s", srcs[i], m.path(fmt.Sprint("w", i)), srcs[i], m.path(fmt.Sprint("w", i)))).CombinedOutput()
			if err != nil {
				errs <- fmt.Errorf("writer %d: %v %s", i, err, out)
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			out, err := exec.Command("sh", "-c", fmt.Sprintf("for k in 1 2 3; do cmp %s %s || exit 1; done", srcs[0], m.path("shared"))).CombinedOutput()
			if err != nil {
				errs <- fmt.Errorf("reader %d: %v %s", i, err, out)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRenameOverOpenReader: a reader that holds the old file open keeps
// reading the old bytes after another file is renamed over it.
func TestRenameOverOpenReader(t *testing.T) {
	m := newMount(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	randFile(t, old, 3<<20, 4)
	randFile(t, filepath.Join(dir, "new"), 2<<20, 5)
	sh(t, fmt.Sprintf("cp %s %s && cp %s %s", old, m.path("f"), filepath.Join(dir, "new"), m.path("f.tmp")))
	cmd := client("holdread", m.path("f"), old)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 5)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "open\n" {
		t.Fatalf("client: %q %v %s", line, err, stderr.String())
	}
	if err := os.Rename(m.path("f.tmp"), m.path("f")); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reader of the replaced file: %v %s", err, stderr.String())
	}
	sh(t, fmt.Sprintf("cmp %s %s", filepath.Join(dir, "new"), m.path("f")))
}

// TestEngineProtocol writes snapshots into the mount as the engine does,
// in both layouts, and reads them back with verification.
func TestEngineProtocol(t *testing.T) {
	m := newMount(t)
	for _, layout := range []string{"whole", "blocks"} {
		dir := m.path("fp/" + layout)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		runClientOK(t, "engine", dir, layout, "300")
		runClientOK(t, "engine", dir, layout, "400")
		for _, n := range []int{300, 400} {
			out := kvfs(t, "inspect", "--verify", filepath.Join(dir, fmt.Sprintf("snap-%d.mlxkv", n)))
			if !strings.Contains(out, "verify:       ok") || !strings.Contains(out, fmt.Sprintf("tokens:       %d", n)) {
				t.Fatalf("%s: %s", layout, out)
			}
		}
	}
	if ents, _ := os.ReadDir(m.path("fp/blocks/blocks")); len(ents) == 0 {
		t.Fatal("no blocks written")
	}
	// The second snapshot shared the first one's rows.
	v, err := getxattr(m.path("fp/whole/snap-400.mlxkv"), "user.kvfs.shared_bytes")
	if err != nil || v == "0" {
		t.Fatalf("shared bytes of the 400-token snapshot: %q %v", v, err)
	}
	if v, _ := getxattr(m.path("fp/whole/snap-400.mlxkv"), "user.kvfs.tokens"); v != "400" {
		t.Fatalf("user.kvfs.tokens = %q", v)
	}
}

func getxattr(path, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := syscall.Getxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func TestXattrs(t *testing.T) {
	m := newMount(t)
	p := m.path("f")
	os.WriteFile(p, []byte("hello"), 0o644)
	if err := syscall.Setxattr(p, "user.note", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := getxattr(p, "user.note"); err != nil || v != "v1" {
		t.Fatalf("user.note = %q %v", v, err)
	}
	if err := syscall.Setxattr(p, "user.kvfs.kind", []byte("x"), 0); err != syscall.EPERM {
		t.Fatalf("set read-only attribute: %v", err)
	}
	if v, _ := getxattr(p, "user.kvfs.logical_bytes"); v != "5" {
		t.Fatalf("logical bytes %q", v)
	}
	if _, err := getxattr(p, "user.missing"); err != syscall.ENODATA {
		t.Fatalf("missing attribute: %v", err)
	}
	if err := syscall.Removexattr(p, "user.note"); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptChunkEIO: with --verify, a corrupted chunk reads as EIO.
func TestCorruptChunkEIO(t *testing.T) {
	m := newMount(t, "--verify")
	src := filepath.Join(t.TempDir(), "f")
	randFile(t, src, 1<<20, 6)
	sh(t, fmt.Sprintf("cp %s %s", src, m.path("f")))
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	packs, _ := filepath.Glob(filepath.Join(m.store, "packs", "*.pack"))
	raw, _ := os.ReadFile(packs[0])
	raw[200_000] ^= 0xff
	os.WriteFile(packs[0], raw, 0o600)
	m.start(t, "--verify")
	_, err := os.ReadFile(m.path("f"))
	if pe, ok := err.(*os.PathError); !ok || pe.Err != syscall.EIO {
		t.Fatalf("read of a corrupt chunk: %v", err)
	}
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if !strings.Contains(string(log), "corrupt chunk") {
		t.Errorf("corruption not logged:\n%s", log)
	}
	// Restore the byte so that the cleanup check passes.
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	raw[200_000] ^= 0xff
	os.WriteFile(packs[0], raw, 0o600)
}

func waitUnmounted(t testing.TB, m *mount) {
	t.Helper()
	s := m.openStore(t) // succeeds once the daemon has exited
	s.Close()
}

// TestKillDaemon: SIGKILL the daemon while processes write, remount, and
// find every file that was committed before the kill intact.
func TestKillDaemon(t *testing.T) {
	m := newMount(t)
	src := t.TempDir()
	var committed []string
	for i := 0; i < 5; i++ {
		p := filepath.Join(src, fmt.Sprint(i))
		randFile(t, p, 1<<20+i*777, uint64(10+i))
		sh(t, fmt.Sprintf("cp %s %s && sync %s", p, m.path(fmt.Sprint(i)), m.path(fmt.Sprint(i))))
		committed = append(committed, p)
	}
	big := filepath.Join(src, "big")
	randFile(t, big, 64<<20, 99)
	writers := exec.Command("sh", "-c", fmt.Sprintf("for k in 1 2 3 4 5 6 7 8; do cp %s %s/w$k & done; wait", big, m.mnt))
	writers.Start()
	time.Sleep(300 * time.Millisecond)
	pid := daemonPID(t, m)
	syscall.Kill(pid, syscall.SIGKILL)
	writers.Wait()
	exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
	waitUnmounted(t, m)
	s := m.openStore(t)
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	m.start(t)
	for i, p := range committed {
		sh(t, fmt.Sprintf("cmp %s %s", p, m.path(fmt.Sprint(i))))
	}
}

// daemonPID finds the kvfs daemon serving m.
func daemonPID(t testing.TB, m *mount) int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", "kvfs mount --foreground .*"+m.store).Output()
	if err != nil {
		t.Fatalf("find daemon: %v", err)
	}
	var pid int
	fmt.Sscan(string(out), &pid)
	return pid
}

// TestEngineBlocksRace: the engine's own race through the mount — one
// process writes blocks, a collect in another process deletes them before
// the manifest is renamed into place, the manifest lands: every block
// still reads back and verifies. Then a manifest in another namespace
// reuses the blocks by lookup alone, and removing a listed block removes
// its name only.
func TestEngineBlocksRace(t *testing.T) {
	// A grace period far shorter than the test: what keeps the blocks
	// is the synced manifest (even under its tmp name), not the grace.
	m := newMount(t, "--blob-grace", "1ms")
	src := "../mlx/testdata/mlxbun/blocks/fixture-fingerprint/base"
	ns := m.path("fp/base")
	// Blocks, as the engine writes them: tmp, fsync, rename.
	sh(t, fmt.Sprintf(`mkdir -p %[2]s/blocks && for f in %[1]s/blocks/*; do h=$(basename $f); cp $f %[2]s/blocks/$h.tmp && sync %[2]s/blocks/$h.tmp && mv %[2]s/blocks/$h.tmp %[2]s/blocks/$h; done`, src, ns))
	// The manifest's tmp file is synced, then a collect runs: no *.mlxkv
	// lists the blocks yet, so it deletes them all.
	manifest := "00000000-0000-4000-8000-000000000400.mlxkv"
	sh(t, fmt.Sprintf("cp %s/%s %s/%s.tmp && sync %s/%s.tmp", src, manifest, ns, manifest, ns, manifest))
	sh(t, fmt.Sprintf("rm %s/blocks/*", ns))
	time.Sleep(2500 * time.Millisecond) // expiry runs every second
	sh(t, fmt.Sprintf("mv %s/%s.tmp %s/%s", ns, manifest, ns, manifest))
	out := kvfs(t, "inspect", "--verify", filepath.Join(ns, manifest))
	if !strings.Contains(out, "verify:       ok") {
		t.Fatalf("after the collect race:\n%s", out)
	}
	// Another namespace: the engine's existence check finds every block.
	other := m.path("fp/other")
	sh(t, fmt.Sprintf("mkdir -p %s/blocks && cp %s/%s %s/", other, src, manifest, other))
	out = kvfs(t, "inspect", "--verify", filepath.Join(other, manifest))
	if !strings.Contains(out, "verify:       ok") {
		t.Fatalf("manifest reusing another namespace's blocks:\n%s", out)
	}
	// Removing a block that a manifest lists removes the name only.
	ents, _ := os.ReadDir(filepath.Join(ns, "blocks"))
	if len(ents) == 0 {
		t.Fatal("no blocks looked up")
	}
	victim := filepath.Join(ns, "blocks", ents[0].Name())
	sh(t, "rm "+victim)
	sh(t, fmt.Sprintf("test \"$(sha256sum < %s | cut -c1-64)\" = %s", victim, ents[0].Name()))
	// A block whose content does not match its name is refused.
	os.WriteFile(filepath.Join(ns, "blocks", "bad.tmp"), []byte("not the content"), 0o600)
	bad := filepath.Join(ns, "blocks", strings.Repeat("ab", 32))
	if err := os.Rename(filepath.Join(ns, "blocks", "bad.tmp"), bad); err == nil {
		t.Fatal("a block with the wrong content was renamed into place")
	}
}

// TestWriteAfterFsync: fsync commits (the spool becomes a pack), and later
// writes through the same descriptor start from the committed content.
func TestWriteAfterFsync(t *testing.T) {
	m := newMount(t)
	runClientOK(t, "fsyncwrite", m.path("f"))
	runClientOK(t, "fsyncwrite", m.path("f")) // again, over an existing file
}

// TestSplicedReads: with 1 MiB chunks, the kernel's 1 MiB reads each fall
// in one chunk and are spliced from the pack file; the bytes must still be
// right, at every alignment.
func TestSplicedReads(t *testing.T) {
	m := newMountInit(t, []string{"--chunk-size", "1MiB"})
	src := filepath.Join(t.TempDir(), "f")
	want := randFile(t, src, 8<<20+12345, 7)
	sh(t, fmt.Sprintf("cp %s %s && cmp %s %s", src, m.path("f"), src, m.path("f")))
	f, err := os.Open(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int64{0, 1, 4095, 1 << 20, 3<<20 - 7, 8 << 20} {
		got := make([]byte, 100_000)
		n, _ := f.ReadAt(got, off)
		if !bytes.Equal(got[:n], want[off:min(off+100_000, int64(len(want)))]) {
			t.Fatalf("read at %d differs", off)
		}
	}
}

// TestKvfsTree: /.kvfs/stats is JSON, and /.kvfs/whole shows a blocks-layout
// snapshot as the engine's whole-layout file of the same tensors, byte for
// byte; /.kvfs is hidden from the root's listing and cannot be shadowed.
func TestKvfsTree(t *testing.T) {
	m := newMount(t)
	src := "../mlx/testdata/mlxbun"
	sh(t, fmt.Sprintf("mkdir -p %[2]s/fp && cp -r %[1]s/blocks/fixture-fingerprint/base %[2]s/fp/", src, m.mnt))
	for _, T := range []string{"300", "400"} {
		name := "00000000-0000-4000-8000-000000000" + T + ".mlxkv"
		sh(t, fmt.Sprintf("cmp %s/whole/fixture-fingerprint/base/%s %s", src, name, m.path(".kvfs/whole/fp/base/"+name)))
		out := sh(t, "stat -c %s "+m.path(".kvfs/whole/fp/base/"+name))
		if fi, _ := os.Stat(filepath.Join(src, "whole/fixture-fingerprint/base", name)); strings.TrimSpace(out) != fmt.Sprint(fi.Size()) {
			t.Errorf("size of the resolved snapshot: %s", out)
		}
	}
	// A block in the whole tree reads as itself.
	sh(t, fmt.Sprintf("cmp %s/blocks/fixture-fingerprint/base/blocks/013dd42f2dc9af1d48a8707dfeb4f4b046d60a8b63f2fa483d951f00c9415146 %s", src, m.path(".kvfs/whole/fp/base/blocks/013dd42f2dc9af1d48a8707dfeb4f4b046d60a8b63f2fa483d951f00c9415146")))
	var st store.Stats
	b, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil || json.Unmarshal(b, &st) != nil || st.Files != 162 {
		t.Fatalf("stats: %v %s", err, b)
	}
	if ls := sh(t, "ls -a "+m.mnt); strings.Contains(ls, ".kvfs") {
		t.Fatalf("root listing shows .kvfs: %s", ls)
	}
	for _, bad := range []string{"mkdir " + m.path(".kvfs/x"), "touch " + m.path(".kvfs/stats"), "mkdir " + m.path(".kvfs"), "touch " + m.path(".kvfs/whole/fp/new")} {
		if err := exec.Command("sh", "-c", bad).Run(); err == nil {
			t.Errorf("%q succeeded on the read-only tree", bad)
		}
	}
}

// TestControlSocket: while the daemon holds the store, the store commands
// go through its control socket, behave as on a store directory, and the
// mount sees their changes at once.
func TestControlSocket(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "f")
	want := randFile(t, src, 3<<20, 8)
	os.MkdirAll(m.path("d"), 0o755)
	os.WriteFile(m.path("d/old"), []byte("old"), 0o644)
	sh(t, "ls -l "+m.path("d")) // the kernel caches the entries
	if out := kvfs(t, "put", m.store, src, "d/old"); !strings.Contains(out, "d/old: 3.0 MiB") {
		t.Fatalf("put: %s", out)
	}
	seenBehindKernel(t, func() error {
		if got, err := os.ReadFile(m.path("d/old")); err != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("the mount does not see the put: %v", err)
		}
		return nil
	})
	if out := kvfs(t, "ls", "-l", m.store, "d"); !strings.Contains(out, "3145728") {
		t.Fatalf("ls: %s", out)
	}
	kvfs(t, "mv", m.store, "d/old", "d/new")
	seenBehindKernel(t, func() error {
		if _, err := os.Stat(m.path("d/old")); !os.IsNotExist(err) {
			return fmt.Errorf("the mount still shows the old name: %v", err)
		}
		return nil
	})
	out := filepath.Join(t.TempDir(), "out")
	kvfs(t, "get", "--verify", m.store, "d/new", out)
	sh(t, fmt.Sprintf("cmp %s %s", src, out))
	if !strings.Contains(kvfs(t, "stats", m.store), "files:         1") {
		t.Fatal("stats through the socket")
	}
	kvfs(t, "rm", m.store, "d/new")
	seenBehindKernel(t, func() error {
		if _, err := os.Stat(m.path("d/new")); !os.IsNotExist(err) {
			return fmt.Errorf("the mount still shows a removed file: %v", err)
		}
		return nil
	})
	// Errors keep their exit codes.
	cmd := exec.Command(kvfsBin, "get", m.store, "missing", out)
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("get of a missing file: %v", err)
	}
}

// TestSIGTERM: the daemon unmounts cleanly on SIGTERM, finishing what is
// in flight: a file whose copy completed is intact after a remount.
func TestSIGTERM(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "f")
	randFile(t, src, 32<<20, 9)
	cp := exec.Command("sh", "-c", fmt.Sprintf("cp %s %s", src, m.path("f")))
	cp.Start()
	time.Sleep(50 * time.Millisecond)
	syscall.Kill(daemonPID(t, m), syscall.SIGTERM)
	cpErr := cp.Wait()
	waitUnmounted(t, m)
	if isMounted(m.mnt) {
		t.Fatal("still mounted after SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(m.store, "kvfs.sock")); !os.IsNotExist(err) {
		t.Fatal("control socket left behind")
	}
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if !strings.Contains(string(log), "unmounted") {
		t.Fatalf("no clean unmount in the log:\n%s", log)
	}
	m.start(t)
	if cpErr == nil {
		sh(t, fmt.Sprintf("cmp %s %s", src, m.path("f")))
	}
}

func TestMetrics(t *testing.T) {
	// A port that was free a moment ago.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := newMount(t, "--metrics", addr)
	src := filepath.Join(t.TempDir(), "f")
	randFile(t, src, 1<<20, 11)
	sh(t, fmt.Sprintf("cp %s %s && cat %s > /dev/null && cat %s/nope 2>/dev/null || true", src, m.path("f"), m.path("f"), m.mnt))
	for _, c := range []struct {
		name  string
		want  int64
		exact bool
	}{
		{"kvfs_commits_total", 1, true}, {"kvfs_write_bytes_total", 1 << 20, true}, {"kvfs_store_files", 1, true},
		{`kvfs_errors_total{errno="ENOENT"}`, 1, false}, {"kvfs_ingest_new_bytes_total", 1 << 20, true},
		{"kvfs_read_bytes_total", 1 << 20, false},
	} {
		if got := metric(t, addr, c.name); got < c.want || c.exact && got != c.want {
			t.Errorf("%s is %d, want %d (exact %v)", c.name, got, c.want, c.exact)
		}
	}
}

// TestMountHelper: mount(8)'s helper contrib/mount.fuse.kvfs mounts with
// fstab-style options.
func TestMountHelper(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	store, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	kvfs(t, "init", store)
	helper := func(args ...string) {
		t.Helper()
		cmd := exec.Command("../contrib/mount.fuse.kvfs", args...)
		cmd.Env = append(os.Environ(), "KVFS="+kvfsBin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mount.fuse.kvfs %v: %v\n%s", args, err, out)
		}
	}
	helper(store, mnt, "-f", "-o", "rw")
	if isMounted(mnt) {
		t.Fatal("-f (fake) mounted")
	}
	helper(store, mnt, "-n", "-o", "rw,noatime,nosuid,nodev,blob_grace=5m,verify,log_level=debug")
	if !isMounted(mnt) {
		t.Fatal("not mounted")
	}
	defer func() {
		kvfs(t, "unmount", mnt)
		m := &mount{store: store, mnt: mnt}
		m.check(t)
	}()
	os.WriteFile(filepath.Join(mnt, "x"), []byte("x"), 0o644)
	if out := sh(t, "ps -eo args | grep '[k]vfs mount --foreground'"); !strings.Contains(out, "--blob-grace 5m0s") || !strings.Contains(out, "--verify") {
		t.Fatalf("daemon arguments: %s", out)
	}
}

// TestSetattr: chmod, chown (root), utimes and truncate through the mount;
// chown by another user is refused by the kernel (default_permissions).
func TestSetattr(t *testing.T) {
	m := newMount(t, "-o", "allow_other") // the other user must reach it
	p := m.path("f")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	sh(t, fmt.Sprintf("truncate -s 4 %[1]s && chmod 600 %[1]s && chown 65534:65534 %[1]s && touch -m -d '2020-01-02 03:04:05' %[1]s", p))
	out := sh(t, "stat -c '%a %u %g %s %Y' "+p)
	if strings.TrimSpace(out) != "600 65534 65534 4 1577934245" {
		t.Fatalf("stat after setattr: %q", out)
	}
	if got, _ := os.ReadFile(p); string(got) != "0123" {
		t.Fatalf("truncated content %q", got)
	}
	sh(t, "truncate -s 8 "+p)
	if got, _ := os.ReadFile(p); string(got) != "0123\x00\x00\x00\x00" {
		t.Fatalf("extended content %q", got)
	}
	// Let the other user reach the mount.
	for d := filepath.Dir(m.mnt); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	if err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "chown", "0", p).Run(); err == nil {
		t.Fatal("a user gave a file away")
	}
	if err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "chmod", "644", p).Run(); err != nil {
		t.Fatalf("the owner could not chmod: %v", err)
	}
}
