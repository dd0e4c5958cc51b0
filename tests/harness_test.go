//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

// kvfsBin is the kvfs binary built by TestMain.
var kvfsBin string

const clientEnv = "KVFS_TEST_CLIENT"

func TestMain(m *testing.M) {
	if name := os.Getenv(clientEnv); name != "" {
		os.Exit(runClient(name, os.Args[len(os.Args)-countClientArgs():]))
	}
	if slices.ContainsFunc(os.Args, func(a string) bool { return strings.HasPrefix(a, "-test.list") }) {
		os.Exit(m.Run()) // listing the tests (scripts/test's shards) needs no kvfs
	}
	dir, err := os.MkdirTemp("", "kvfs-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Other users run kvfs and clients from here (users_test.go).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kvfsBin = filepath.Join(dir, "kvfs")
	args := []string{"build", "-o", kvfsBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "../cmd/kvfs")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build kvfs: %v\n%s", err, out)
		os.Exit(1)
	}
	before := map[string]bool{}
	for _, m := range kvfsMounts() {
		before[m] = true
	}
	code := m.Run()
	os.RemoveAll(dir)
	for _, m := range kvfsMounts() {
		// Only the tests' own mounts (in temporary directories) count: a
		// developer's mount elsewhere is not the tests' to judge.
		if !before[m] && strings.HasPrefix(m, os.TempDir()) {
			fmt.Fprintf(os.Stderr, "kvfs mount left behind by the tests: %s\n", m)
			code = 1
		}
	}
	os.Exit(code)
}

// requireRoot fails a test that needs root (to mount without fusermount)
// unless the developer opted out with KVFS_TEST_NO_ROOT=1, which CI never
// sets: a FUSE test that cannot mount must not pass silently.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("KVFS_TEST_NO_ROOT") == "1" {
		t.Skip("needs root; skipped because KVFS_TEST_NO_ROOT=1")
	}
	t.Fatal("needs root to mount FUSE directly; run as root or set KVFS_TEST_NO_ROOT=1 to skip")
}

// kvfsMounts lists the mount points of kvfs mounts, from mountinfo.
func kvfsMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "fuse.kvfs" {
				out = append(out, fields[4])
			}
		}
	}
	return out
}

func isMounted(mnt string) bool {
	for _, m := range kvfsMounts() {
		if m == mnt {
			return true
		}
	}
	return false
}

// kvfs runs the kvfs binary and fails the test on error.
func kvfs(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(kvfsBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kvfs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// mount is a kvfs daemon serving a fresh store.
type mount struct {
	store, mnt string
}

// newMount initialises a store, mounts it with the kvfs binary (in the
// background, as users do) and, at cleanup, unmounts it, waits for the
// daemon to let go of the store and checks the store's invariants.
func newMount(t testing.TB, mountArgs ...string) *mount {
	t.Helper()
	return newMountInit(t, nil, mountArgs...)
}

// newMountInit is newMount with arguments for kvfs init.
func newMountInit(t testing.TB, initArgs []string, mountArgs ...string) *mount {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	m := &mount{store: filepath.Join(dir, "store"), mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	kvfs(t, append(append([]string{"init"}, initArgs...), m.store)...)
	m.start(t, mountArgs...)
	t.Cleanup(func() {
		if isMounted(m.mnt) {
			if out, err := exec.Command(kvfsBin, "unmount", m.mnt).CombinedOutput(); err != nil {
				t.Errorf("unmount: %v\n%s", err, out)
				exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
			}
		}
		m.check(t)
	})
	return m
}

// start mounts the store and checks mountinfo. KVFS_TEST_MOUNT_ARGS
// (split at spaces) adds mount arguments to every mount of a run, e.g.
// "-o writeback_cache" to run tests with the kernel's writeback cache.
//
// Every file is evictable as soon as it is written (--evict-min-age 0,
// which an argument of the test's own overrides): the capacity tests fill
// a store and evict at once. TestEvictSparesFreshFiles checks the default.
func (m *mount) start(t testing.TB, args ...string) {
	t.Helper()
	args = append([]string{"--evict-min-age", "0"}, args...)
	args = append(args, strings.Fields(os.Getenv("KVFS_TEST_MOUNT_ARGS"))...)
	kvfs(t, append(append([]string{"mount"}, args...), m.store, m.mnt)...)
	if !isMounted(m.mnt) {
		t.Fatalf("kvfs mount returned but %s is not in mountinfo", m.mnt)
	}
}

// openStore opens the store once the daemon has released it.
func (m *mount) openStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(m.store, store.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
		t.Fatalf("open store after unmount: %v\ndaemon log:\n%s", err, log)
	}
	return s
}

// readStored reads the whole of the file at p from a store opened with
// openStore (the kill tests' check of what a crash left).
func readStored(s *store.Store, p string) ([]byte, error) {
	f, err := s.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, f.Size())
	n, err := f.ReadAt(b, 0)
	if n < len(b) {
		return nil, fmt.Errorf("read %s from the store: %d of %d bytes: %v", p, n, len(b), err)
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// check verifies the store's invariants after the daemon has exited.
func (m *mount) check(t testing.TB) {
	t.Helper()
	s := m.openStore(t)
	defer s.Close()
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Error(err)
	}
}

func (m *mount) path(p string) string { return filepath.Join(m.mnt, p) }

// sh runs a shell command line as a separate process.
func sh(t testing.TB, script string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("sh -c %q: %v\n%s", script, err, out)
	}
	return string(out)
}

// client starts this test binary as a client process running the named
// client function (clients.go) with args.
func client(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), clientEnv+"="+name, fmt.Sprintf("KVFS_TEST_CLIENT_ARGS=%d", len(args)))
	return cmd
}

// startClient starts client name with args, its output (stdout and stderr)
// into the buffer returned.
func startClient(t testing.TB, name string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	c := client(name, args...)
	out := &bytes.Buffer{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatalf("start client %s: %v", name, err)
	}
	return c, out
}

// startServingClient starts client name with args and waits for its
// "ready" line (a file system it serves is mounted); the caller stops it
// with SIGTERM.
func startServingClient(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	c := client(name, args...)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatalf("start client %s: %v", name, err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("client %s: %q", name, line)
	}
	return c
}

func countClientArgs() int {
	var n int
	fmt.Sscan(os.Getenv("KVFS_TEST_CLIENT_ARGS"), &n)
	return n
}

// runClientOK runs a client to completion and fails the test on error.
func runClientOK(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := client(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("client %s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
