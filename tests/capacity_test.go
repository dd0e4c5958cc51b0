//go:build linux

package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Capacity and retention through a real mount (issue 10): files written
// through the mount past the capacity, some held open by another process,
// some mmapped by another, some pinned (the xattr, kvfs pin), the rest
// idle: only idle unpinned files go, in the policy's order, and stored
// bytes end under the capacity.

func init() {
	// capopen FILE: open FILE for reading, print "ready", hold it until
	// stdin closes.
	clients["capopen"] = func(args []string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		return nil
	}
	// capmmap FILE: mmap FILE, close the descriptor (the mapping keeps
	// the file open), print "ready", hold the mapping until stdin closes,
	// then read it through.
	clients["capmmap"] = func(args []string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			return fmt.Errorf("mmap %s: %w", args[0], err)
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		var x byte
		for i := 0; i < len(b); i += 4096 {
			x ^= b[i]
		}
		_ = x
		return unix.Munmap(b)
	}
	// cappin FILE: set user.kvfs.pin on FILE.
	clients["cappin"] = func(args []string) error {
		if err := unix.Setxattr(args[0], "user.kvfs.pin", []byte("1"), 0); err != nil {
			return fmt.Errorf("setxattr %s: %w", args[0], err)
		}
		return nil
	}
}

// capHolder runs a holding client until the test ends (or release).
type capHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func capHold(t *testing.T, name, path string) *capHolder {
	t.Helper()
	cmd := client(name, path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &capHolder{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { h.release(t) })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("client %s %s: %q", name, path, line)
	}
	return h
}

func (h *capHolder) release(t *testing.T) {
	if h.stdin != nil {
		h.stdin.Close()
		h.stdin = nil
		if err := h.cmd.Wait(); err != nil {
			t.Errorf("holding client: %v", err)
		}
	}
}

// capStats reads /.kvfs/stats through the mount.
type capStats struct {
	StoredBytes int64 `json:"storedBytes"`
	Capacity    int64 `json:"capacity"`
	Evictions   struct {
		Files int64 `json:"files"`
		Bytes int64 `json:"bytes"`
	} `json:"evictions"`
}

func readCapStats(t *testing.T, m *mount) capStats {
	t.Helper()
	b, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil {
		t.Fatal(err)
	}
	var st capStats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("stats %s: %v", b, err)
	}
	return st
}

// writeFile writes n random bytes to the mount with cp, a separate
// process, and waits a little so that files' times are apart.
func writeCapFile(t *testing.T, m *mount, name string, n int, seed uint64) {
	t.Helper()
	src := filepath.Join(t.TempDir(), name)
	randFile(t, src, n, seed)
	sh(t, fmt.Sprintf("cp %s %s", src, m.path(name)))
	time.Sleep(20 * time.Millisecond)
}

var evictedRe = regexp.MustCompile(`msg=evicted path=(\S+)`)

// evictedOrder is the order of the daemon's eviction log lines.
func evictedOrder(t *testing.T, m *mount) []string {
	b, err := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range evictedRe.FindAllStringSubmatch(string(b), -1) {
		out = append(out, strings.TrimPrefix(g[1], "/"))
	}
	return out
}

// waitEvicted waits until the daemon evicted n files.
func waitEvicted(t *testing.T, m *mount, n int) capStats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := readCapStats(t, m)
		if st.Evictions.Files >= int64(n) {
			time.Sleep(200 * time.Millisecond) // anything more would show now
			return readCapStats(t, m)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d evictions after 20 s, want %d: %+v\n%s", st.Evictions.Files, n, st, evictedOrder(t, m))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// capMix sets up the files that must stay: "open" held by a reader
// process, "mapped" mmapped by another, "pinx" pinned through the xattr
// by another, "pinc" pinned with kvfs pin; each 256 KiB.
func capMix(t *testing.T, m *mount, pinArgs func(path string) []string) {
	writeCapFile(t, m, "open", 256<<10, 1)
	writeCapFile(t, m, "mapped", 256<<10, 2)
	writeCapFile(t, m, "pinx", 256<<10, 3)
	writeCapFile(t, m, "pinc", 256<<10, 4)
	capHold(t, "capopen", m.path("open"))
	capHold(t, "capmmap", m.path("mapped"))
	runClientOK(t, "cappin", m.path("pinx"))
	kvfs(t, pinArgs(m.path("pinc"))...)
	if v, err := getxattr(m.path("pinc"), "user.kvfs.pin"); err != nil || v != "1" {
		t.Fatalf("getxattr user.kvfs.pin of pinc: %q %v", v, err)
	}
}

// checkEvicted checks that exactly want went, in that order, that the
// rest is there, and that stored bytes are under capacity.
func checkEvicted(t *testing.T, m *mount, all, want []string, capacity int64) {
	t.Helper()
	st := waitEvicted(t, m, len(want))
	if got := evictedOrder(t, m); !slices.Equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if st.Evictions.Files != int64(len(want)) {
		t.Fatalf("stats count %d evictions, want %d", st.Evictions.Files, len(want))
	}
	if st.StoredBytes > capacity*90/100 || st.Capacity != capacity {
		t.Fatalf("stored %d, capacity %d: want under %d", st.StoredBytes, st.Capacity, capacity*90/100)
	}
	for _, f := range all {
		_, err := os.Stat(m.path(f))
		gone := slices.Contains(want, f)
		if gone && !os.IsNotExist(err) || !gone && err != nil {
			t.Errorf("%s: evicted %v, stat: %v", f, gone, err)
		}
	}
}

// TestCapacityLRU: 10 files of 256 KiB (2.5 MiB); the capacity set to
// 2000 KiB while mounted; low water 1800 KiB: three idle files go, oldest
// use first. idle2, read after all were written, is the most recent.
func TestCapacityLRU(t *testing.T) {
	m := newMount(t)
	capMix(t, m, func(p string) []string { return []string{"pin", p} })
	idle := []string{"idle1", "idle2", "idle3", "idle4", "idle5", "idle6"}
	for i, f := range idle {
		writeCapFile(t, m, f, 256<<10, uint64(10+i))
	}
	sh(t, "cat "+m.path("idle2")+" > /dev/null")
	if st := readCapStats(t, m); st.Evictions.Files != 0 || st.StoredBytes != 10*256<<10 {
		t.Fatalf("before the capacity: %+v", st)
	}
	out := kvfs(t, "config", m.store, "capacity=2000K")
	if !strings.Contains(out, "capacity=2048000") || !strings.Contains(out, "retention=lru") {
		t.Fatalf("config: %s", out)
	}
	all := append([]string{"open", "mapped", "pinx", "pinc"}, idle...)
	checkEvicted(t, m, all, []string{"idle1", "idle3", "idle4"}, 2000<<10)
}

// TestCapacityCostSize: the same mix; idle files of different sizes and
// uses (cost 1 each: plain files), priority uses/bytes, lowest first:
//
//	idle3 128 KiB, 1 use  7.6e-6      idle1 512 KiB, 1 use  1.9e-6
//	idle4 256 KiB, 1 use  3.8e-6      idle6 384 KiB, 1 use  2.5e-6
//	idle5  64 KiB, 1 use  1.5e-5      idle2 256 KiB, 3 uses 1.1e-5
//
// Stored 1024 + 1600 KiB; capacity 2 MiB, low water 1843.2 KiB: 780.8
// KiB must go: idle1 (512) then idle6 (384). (LRU would take idle3,
// idle4, idle5, idle1.)
func TestCapacityCostSize(t *testing.T) {
	m := newMount(t, "--retention", "cost-size")
	capMix(t, m, func(p string) []string { return []string{"pin", "--store", m.store, "/" + filepath.Base(p)} })
	sizes := map[string]int{"idle3": 128, "idle4": 256, "idle5": 64, "idle1": 512, "idle6": 384, "idle2": 256}
	idle := []string{"idle3", "idle4", "idle5", "idle1", "idle6", "idle2"}
	for i, f := range idle {
		writeCapFile(t, m, f, sizes[f]<<10, uint64(20+i))
	}
	for range 3 {
		sh(t, "cat "+m.path("idle2")+" > /dev/null")
	}
	if out := kvfs(t, "config", m.store); !strings.Contains(out, "retention=cost-size") || !strings.Contains(out, "capacity=unlimited") {
		t.Fatalf("config: %s", out)
	}
	kvfs(t, "config", m.store, "capacity=2M")
	all := append([]string{"open", "mapped", "pinx", "pinc"}, idle...)
	checkEvicted(t, m, all, []string{"idle1", "idle6"}, 2<<20)
}

// TestCapacityPinsAndConfig: unpinning lets a file go; bad settings are
// errors naming the key and value; settings persist across a remount.
func TestCapacityPinsAndConfig(t *testing.T) {
	m := newMount(t, "--capacity", "1G")
	writeCapFile(t, m, "a", 256<<10, 1)
	writeCapFile(t, m, "b", 256<<10, 2)
	kvfs(t, "pin", m.path("a"), m.path("b"))
	kvfs(t, "config", m.store, "capacity=300K")
	time.Sleep(300 * time.Millisecond)
	if st := readCapStats(t, m); st.Evictions.Files != 0 {
		t.Fatalf("pinned files evicted: %+v", st)
	}
	kvfs(t, "unpin", m.path("a"))
	if _, err := getxattr(m.path("a"), "user.kvfs.pin"); err == nil {
		t.Fatal("a still pinned")
	}
	kvfs(t, "config", m.store, "low_water=80") // wakes the evictor
	waitEvicted(t, m, 1)
	if _, err := os.Stat(m.path("a")); !os.IsNotExist(err) {
		t.Fatalf("unpinned a not evicted: %v", err)
	}
	for _, bad := range []struct{ arg, want string }{
		{"capacity=12X", `capacity=12X`},
		{"retention=fifo", `retention=fifo`},
		{"colour=red", `unknown key "colour"`},
		{"low_water=0", `low_water=0`},
	} {
		cmd := exec.Command(kvfsBin, "config", m.store, bad.arg)
		out, err := cmd.CombinedOutput()
		if err == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), bad.want) {
			t.Errorf("config %s: %v, exit %d:\n%s", bad.arg, err, cmd.ProcessState.ExitCode(), out)
		}
	}
	cmd := exec.Command(kvfsBin, "mount", "--capacity", "lots", m.store, t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "lots") {
		t.Errorf("mount --capacity lots: %v\n%s", err, out)
	}
	if err := syscall.Unmount(m.mnt, 0); err != nil {
		t.Fatal(err)
	}
	waitUnmounted(t, m)
	out := kvfs(t, "config", m.store)
	if !strings.Contains(out, "capacity=307200") || !strings.Contains(out, "low_water=80%") {
		t.Fatalf("offline config after unmount: %s", out)
	}
	kvfs(t, "config", m.store, "capacity=0")
	if out := kvfs(t, "config", m.store); !strings.Contains(out, "capacity=unlimited") {
		t.Fatalf("offline config change: %s", out)
	}
}
