//go:build linux

package tests

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/internal/testutil"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Descriptor tests (issue 7, defect 5): the daemon runs with a low
// RLIMIT_NOFILE and a workload that used to leak a descriptor per
// operation; no operation may fail, every byte must read back, and the
// daemon's descriptor count must stay bounded.

func init() {
	clients["fdchurn"] = fdChurn
	clients["fdnew"] = fdNew
	clients["holdcreate"] = holdCreate
}

// fdAllowance is how far above its count at start the daemon's open
// descriptors may go.
const fdAllowance = 200

// limitedMount is a mount whose daemon runs with RLIMIT_NOFILE soft = hard
// = nofile, and its process id.
type limitedMount struct {
	*mount
	pid int
}

// newLimitedMount initialises a store and mounts it with the daemon's
// descriptor limit at nofile, checked in /proc/PID/limits. At cleanup it
// unmounts and checks the store, as newMount does.
func newLimitedMount(t *testing.T, nofile int, mountArgs ...string) *limitedMount {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	m := &mount{store: filepath.Join(dir, "store"), mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "init", m.store)
	// ulimit -n sets both limits; the background daemon inherits them.
	cmd := exec.Command("sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), kvfsBin, "mount"}, append(mountArgs, m.store, m.mnt)...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kvfs mount with ulimit -n %d: %v\n%s", nofile, err, out)
	}
	t.Cleanup(func() {
		if isMounted(m.mnt) {
			if out, err := exec.Command(kvfsBin, "unmount", m.mnt).CombinedOutput(); err != nil {
				t.Errorf("unmount: %v\n%s", err, out)
				exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
			}
		}
		m.check(t)
	})
	if !isMounted(m.mnt) {
		t.Fatalf("kvfs mount returned but %s is not in mountinfo", m.mnt)
	}
	lm := &limitedMount{mount: m, pid: daemonPID(t, m)}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", lm.pid))
	if err != nil {
		t.Fatal(err)
	}
	var soft, hard string
	for _, l := range strings.Split(string(limits), "\n") {
		if f := strings.Fields(strings.TrimPrefix(l, "Max open files")); l != "" && strings.HasPrefix(l, "Max open files") && len(f) >= 2 {
			soft, hard = f[0], f[1]
		}
	}
	if want := strconv.Itoa(nofile); soft != want || hard != want {
		t.Fatalf("daemon %d runs with open files %s:%s, want %d:%d", lm.pid, soft, hard, nofile, nofile)
	}
	return lm
}

// fds counts the daemon's open descriptors.
func (m *limitedMount) fds(t *testing.T) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", m.pid))
	if err != nil {
		t.Errorf("daemon descriptors: %v", err)
		return 0
	}
	return len(ents)
}

// watchFds samples the daemon's descriptor count until stop is called,
// which returns the highest count seen.
func (m *limitedMount) watchFds(t *testing.T) (stop func() int) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n := int64(m.fds(t)); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() int { close(done); wg.Wait(); return int(peak.Load()) }
}

// noFdErrors fails the test if the daemon logged running out.
func (m *limitedMount) noFdErrors(t *testing.T) {
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if bytes.Contains(log, []byte("too many open files")) || bytes.Contains(log, []byte("out of file descriptors")) {
		t.Errorf("daemon ran out of descriptors:\n%s", log)
	}
}

// fdCounts are the test's sizes: the numbers with KVFS_STRESS=full;
// otherwise fewer operations under a lower limit, so that a leak of one
// descriptor per operation still runs out.
func fdCounts() (nofile, ops, newFiles int) {
	if testutil.StressFull() {
		return 1024, 50000, 30000
	}
	return 256, 1500, 1500
}

// TestFdLimitRewrites replaces existing files in place, every way a
// program does (O_TRUNC rewrite and close, truncate(path), write and fsync
// on an open descriptor then write again, rename over), verifying each
// file after every operation. Each of these used to leak a descriptor of
// the daemon for good.
func TestFdLimitRewrites(t *testing.T) {
	nofile, ops, _ := fdCounts()
	m := newLimitedMount(t, nofile)
	base := m.fds(t)
	stop := m.watchFds(t)
	out, err := client("fdchurn", m.path("churn"), strconv.Itoa(ops)).CombinedOutput()
	peak := stop()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	t.Logf("%d operations; daemon descriptors: %d at start, at most %d, %d at the end (limit %d)", ops, base, peak, m.fds(t), nofile)
	if peak-base >= fdAllowance {
		t.Errorf("daemon descriptors rose from %d to %d", base, peak)
	}
	m.noFdErrors(t)
}

// TestFdLimitNewFiles writes many new small files, each read back as soon
// as it is written (which opens the packs holding it) and again at the end.
// Mostly new, each small file becomes its own pack: the descriptors that
// reads open must be bounded however many packs there are.
func TestFdLimitNewFiles(t *testing.T) {
	nofile, _, n := fdCounts()
	m := newLimitedMount(t, nofile)
	base := m.fds(t)
	stop := m.watchFds(t)
	out, err := client("fdnew", m.path("new"), strconv.Itoa(n)).CombinedOutput()
	peak := stop()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	t.Logf("%d new files; daemon descriptors: %d at start, at most %d, %d at the end (limit %d)", n, base, peak, m.fds(t), nofile)
	if peak-base >= fdAllowance {
		t.Errorf("daemon descriptors rose from %d to %d", base, peak)
	}
	m.noFdErrors(t)
}

// TestFdLimitFailedCreateLeavesNoName runs the daemon out of descriptors
// for real, by holding files open for writing (each holds a spool file in
// the daemon, with --no-mem-spool) until creates fail: a create that fails
// must leave no name, the shortage is logged once with the limit, and
// everything works again once the files are closed.
func TestFdLimitFailedCreateLeavesNoName(t *testing.T) {
	m := newLimitedMount(t, 64, "--no-mem-spool")
	out, err := client("holdcreate", m.path("held"), "100").CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	var created, failed int
	if _, err := fmt.Sscanf(string(out), "created %d failed %d", &created, &failed); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	t.Logf("created %d, failed %d", created, failed)
	if failed == 0 {
		t.Fatal("no create failed: the daemon did not run out of descriptors")
	}
	ents, err := os.ReadDir(m.path("held"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != created {
		t.Errorf("%d names after %d creates succeeded and %d failed", len(ents), created, failed)
	}
	for i := 0; i < created; i++ {
		if err := checkFile(m.path(fmt.Sprintf("held/f%03d", i)), heldContent(i)); err != nil {
			t.Error(err)
		}
	}
	// Everything works again, and the shortage was logged once.
	if err := os.WriteFile(m.path("after"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if n := bytes.Count(log, []byte("filesystem: out of file descriptors")); n != 1 {
		t.Errorf("shortage logged %d times, want once:\n%s", n, log)
	}
	if !bytes.Contains(log, []byte("nofile_soft=64 nofile_hard=64")) {
		t.Errorf("log lacks the limit:\n%s", log)
	}
}

// heldContent is the content of holdCreate's file i: a 64 KiB chunk they
// all share and a tail of their own, so that they are stored in two packs
// (the files' own descriptors are what this test is about, not packs').
func heldContent(i int) []byte {
	return append(content(64<<10, 7), fmt.Sprintf("file %d\n", i)...)
}

// TestSocketPutFailureLeavesNoName: a put through the control socket that
// fails (here the daemon cannot create its spool file) leaves neither the
// name nor its missing parent directory.
func TestSocketPutFailureLeavesNoName(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, bytes.Repeat([]byte("x"), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(m.store, "spool")
	if err := os.Rename(spool, spool+".away"); err != nil {
		t.Fatal(err)
	}
	// A file where the spool directory was: creating a spool file fails
	// with ENOTDIR, even for root.
	if err := os.WriteFile(spool, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kvfsBin, "put", m.store, src, "dir/file").CombinedOutput()
	os.Remove(spool)
	if rerr := os.Rename(spool+".away", spool); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatalf("put succeeded without a spool directory:\n%s", out)
	}
	if !strings.Contains(string(out), "spool") {
		t.Errorf("error does not say what failed: %s", out)
	}
	if _, err := os.Lstat(m.path("dir")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after a failed put: stat dir: %v, want ENOENT", err)
	}
	if out, err := exec.Command(kvfsBin, "stat", m.store, "dir/file").CombinedOutput(); err == nil {
		t.Errorf("after a failed put, kvfs stat finds it:\n%s", out)
	}
	kvfs(t, "put", m.store, src, "dir/file")
	seenBehindKernel(t, func() error {
		if got, err := os.ReadFile(m.path("dir/file")); err != nil || len(got) != 100000 {
			return fmt.Errorf("put after the failure: %d bytes, %v", len(got), err)
		}
		return nil
	})
}

// fillContent fills b with the bytes of a file's version, from a seed.
func fillContent(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

func content(n int, seed uint64) []byte {
	b := make([]byte, n)
	fillContent(b, seed)
	return b
}

// checkFile compares a file with what it must hold.
func checkFile(path string, want []byte) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return fmt.Errorf("%s: %d bytes, want %d, first difference at %d", path, len(got), len(want), i)
	}
	return nil
}

// fdChurn DIR OPS: make 16 files of 70 KB in DIR and replace their content
// OPS times, cycling through the ways of replacing a file in place; verify
// the file after each operation and all of them at the end.
func fdChurn(args []string) error {
	dir := args[0]
	ops, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const files, size = 16, 70000
	want := make([][]byte, files)
	name := func(j int) string { return filepath.Join(dir, fmt.Sprintf("f%02d", j)) }
	for j := range want {
		want[j] = content(size, uint64(j))
		if err := os.WriteFile(name(j), want[j], 0o644); err != nil {
			return err
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < ops; i++ {
		j, seed := i%files, uint64(1000+i)
		p := name(j)
		var err error
		switch op := (i / files) % 4; op {
		case 0: // O_TRUNC rewrite, then close
			want[j] = content(size, seed)
			err = os.WriteFile(p, want[j], 0o644)
		case 1: // truncate(path), shorter or longer
			n := 30000 + r.IntN(70000)
			if n <= len(want[j]) {
				want[j] = want[j][:n:n]
			} else {
				want[j] = append(want[j], make([]byte, n-len(want[j]))...)
			}
			err = os.Truncate(p, int64(n))
		case 2: // write and fsync on an open descriptor, write again, close
			want[j], err = writeFsync(p, want[j], seed, r)
		case 3: // write a temporary file and rename it over
			want[j] = content(size, seed)
			tmp := filepath.Join(dir, fmt.Sprintf(".tmp%02d", j))
			if err = os.WriteFile(tmp, want[j], 0o644); err == nil {
				err = os.Rename(tmp, p)
			}
		}
		if err != nil {
			return fmt.Errorf("operation %d on %s: %w", i, p, err)
		}
		if err := checkFile(p, want[j]); err != nil {
			return fmt.Errorf("after operation %d: %w", i, err)
		}
	}
	for j := range want {
		if err := checkFile(name(j), want[j]); err != nil {
			return fmt.Errorf("at the end: %w", err)
		}
	}
	return nil
}

// writeFsync writes into an existing file through a descriptor, fsyncs,
// writes again (past the end too) and closes; it returns what the file
// holds then, from cur, what it held before.
func writeFsync(p string, cur []byte, seed uint64, r *rand.Rand) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cur = append([]byte(nil), cur...)
	apply := func(off int, b []byte) error {
		if _, err := f.WriteAt(b, int64(off)); err != nil {
			return err
		}
		if end := off + len(b); end > len(cur) {
			cur = append(cur, make([]byte, end-len(cur))...)
		}
		copy(cur[off:], b)
		return nil
	}
	if err := apply(r.IntN(len(cur)+1), content(20000, seed)); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := apply(r.IntN(len(cur)+1), content(5000, seed+1<<32)); err != nil {
		return nil, err
	}
	if len(cur) > 100000 {
		// Keep files near their size.
		if err := f.Truncate(70000); err != nil {
			return nil, err
		}
		cur = cur[:70000]
	}
	return cur, f.Close()
}

// fdNew DIR N: write N new small files (1 to 8 KB) in DIR, 100 to a
// directory, reading each back at once, and read every one back at the end.
func fdNew(args []string) error {
	dir := args[0]
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	path := func(i int) string { return filepath.Join(dir, fmt.Sprintf("d%03d/f%05d", i/100, i)) }
	data := func(i int) []byte { return content(1000+(i*7919)%7192, uint64(1<<40+i)) }
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(path(i)), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path(i), data(i), 0o644); err != nil {
			return fmt.Errorf("new file %d: %w", i, err)
		}
		if err := checkFile(path(i), data(i)); err != nil {
			return fmt.Errorf("new file %d: %w", i, err)
		}
	}
	for i := 0; i < n; i++ {
		if err := checkFile(path(i), data(i)); err != nil {
			return fmt.Errorf("at the end: %w", err)
		}
	}
	return nil
}

// holdCreate DIR N: create up to N files in DIR, keeping each open (each
// holds a spool file in the daemon), until creates fail; check that a
// failed create left no name; then close them all, write each, and print
// how many were created and how many failed.
func holdCreate(args []string) error {
	dir := args[0]
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var open []*os.File
	failed := 0
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("f%03d", len(open)))
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				return fmt.Errorf("create %s: %w, want EMFILE", p, err)
			}
			failed++
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("create %s failed, yet stat says %v", p, err)
			}
			continue
		}
		open = append(open, f)
	}
	// Closing an empty new file commits nothing, so it needs no
	// descriptor; writing does, once they are closed.
	for _, f := range open {
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", f.Name(), err)
		}
	}
	for i, f := range open {
		if err := os.WriteFile(f.Name(), heldContent(i), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("created %d failed %d\n", len(open), failed)
	return nil
}

// TestFdLimitMemSpoolsHoldNone: with small files' spools in memory (the
// default), files held open for writing hold no descriptor of the daemon:
// 100 of them open at once under a limit of 64 all create, and read back
// whole once written.
func TestFdLimitMemSpoolsHoldNone(t *testing.T) {
	m := newLimitedMount(t, 64)
	out, err := client("holdcreate", m.path("held"), "100").CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "created 100 failed 0" {
		t.Fatalf("holding 100 new files open under a limit of 64: %s", out)
	}
	for i := 0; i < 100; i++ {
		if err := checkFile(m.path(fmt.Sprintf("held/f%03d", i)), heldContent(i)); err != nil {
			t.Error(err)
		}
	}
	m.noFdErrors(t)
}
