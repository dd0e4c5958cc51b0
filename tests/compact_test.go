//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// compactContent is the content of file i of the compaction test: 100-200
// KB, unique.
func compactContent(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 0xc0ffee))
	b := make([]byte, 100_000+r.IntN(100_000))
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return b
}

func init() {
	// compactverify SECONDS STOPFILE PATH...: until STOPFILE exists (or
	// SECONDS pass), reads each PATH (named "c<i>") at random unaligned
	// offsets, its page cache dropped first so that the daemon serves
	// every read, through one descriptor held all along and through
	// fresh ones, and checks the bytes against compactContent(i). Prints
	// "ok N" with the number of reads.
	clients["compactverify"] = func(args []string) error {
		secs, _ := strconv.Atoi(args[0])
		stop, paths := args[1], args[2:]
		want := map[string][]byte{}
		held := map[string]*os.File{}
		for _, p := range paths {
			i, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "c"))
			if err != nil {
				return err
			}
			want[p] = compactContent(i)
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			held[p] = f
		}
		r := rand.New(rand.NewPCG(1, 2))
		deadline := time.Now().Add(time.Duration(secs) * time.Second)
		n := 0
		for time.Now().Before(deadline) {
			if _, err := os.Stat(stop); err == nil && n > 0 {
				break
			}
			for _, p := range paths {
				for _, fresh := range []bool{false, true} {
					f := held[p]
					if fresh {
						var err error
						if f, err = os.Open(p); err != nil {
							return err
						}
					}
					unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
					w := want[p]
					off := r.IntN(len(w))
					k := min(len(w)-off, 1+r.IntN(70_000))
					buf := make([]byte, k)
					_, err := f.ReadAt(buf, int64(off))
					if fresh {
						f.Close()
					}
					if err != nil {
						return fmt.Errorf("read %s [%d,+%d): %w", p, off, k, err)
					}
					if !bytes.Equal(buf, w[off:off+k]) {
						return fmt.Errorf("%s [%d,+%d): wrong bytes", p, off, k)
					}
					n++
				}
			}
		}
		fmt.Println("ok", n)
		return nil
	}
}

// packUsage is the number of a store's pack files and their allocated
// bytes.
func packUsage(t testing.TB, storeDir string) (int, int64) {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(storeDir, "packs", "*.pack"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range packs {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return len(packs), n
}

// settledPackUsage is packUsage once the daemon has finished punching
// the chunks of files just removed (in the background, punchq.go): the
// same twice, 300 ms apart (up to 10 s).
func settledPackUsage(t testing.TB, storeDir string) (int, int64) {
	t.Helper()
	n, d := packUsage(t, storeDir)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		n2, d2 := packUsage(t, storeDir)
		if n2 == n && d2 == d {
			break
		}
		n, d = n2, d2
	}
	return n, d
}

// TestCompactMounted: files written through the mount, most removed; kvfs
// gc, run while mounted, goes through the daemon's control socket (the
// daemon holds the store's lock, so nothing else could compact it) and
// rewrites the mostly dead packs, while a reader process verifies the
// remaining files' bytes through descriptors opened before and during the
// compaction. Pack count and disk usage drop; no read fails or differs.
// Before kvfs gc existed the command failed; before readers looked moved
// chunks up again, the held descriptors read ENOENT from removed packs.
func TestCompactMounted(t *testing.T) {
	m := newMount(t, "--compact-interval=0", "--pack-bytes=1048576")
	var keep []string
	for i := 0; i < 80; i++ {
		p := m.path(fmt.Sprintf("c%d", i))
		if err := os.WriteFile(p, compactContent(i), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			keep = append(keep, p)
		}
	}
	for i := 0; i < 80; i++ {
		if i%4 != 0 {
			if err := os.Remove(m.path(fmt.Sprintf("c%d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	packsBefore, diskBefore := settledPackUsage(t, m.store)

	dry := kvfs(t, "gc", "--dry-run", m.store)
	if !strings.Contains(dry, "dry run: would rewrite") {
		t.Fatalf("kvfs gc --dry-run printed:\n%s", dry)
	}
	if n, d := packUsage(t, m.store); n != packsBefore || d != diskBefore {
		t.Fatalf("a dry run changed the packs: %d packs, %d bytes; before %d, %d", n, d, packsBefore, diskBefore)
	}

	stop := filepath.Join(t.TempDir(), "stop")
	reader := client("compactverify", append([]string{"60", stop}, keep...)...)
	var out bytes.Buffer
	reader.Stdout, reader.Stderr = &out, &out
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the reader holds its descriptors
	gcOut := kvfs(t, "gc", m.store)
	time.Sleep(300 * time.Millisecond) // and reads from the moved chunks
	os.WriteFile(stop, nil, 0o644)
	if err := reader.Wait(); err != nil {
		t.Fatalf("reader: %v\n%s", err, out.String())
	}
	t.Logf("kvfs gc: %sreader: %s", gcOut, out.String())
	if !strings.Contains(gcOut, "rewrote") || strings.Contains(gcOut, "rewrote 0 pack") {
		t.Fatalf("kvfs gc rewrote nothing:\n%s", gcOut)
	}
	packsAfter, diskAfter := packUsage(t, m.store)
	if packsAfter >= packsBefore || diskAfter >= diskBefore {
		t.Fatalf("after kvfs gc: %d packs using %d bytes; before: %d packs, %d bytes", packsAfter, diskAfter, packsBefore, diskBefore)
	}
	for _, p := range keep {
		i, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "c"))
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, compactContent(i)) {
			t.Fatalf("%s after kvfs gc: %v, or other bytes", p, err)
		}
	}
}

// TestCompactBackground: a daemon started in the background (as kvfs
// mount does by default) compacts at the --compact-interval it was given:
// the packs of removed files are rewritten with no kvfs gc run. Before,
// the daemon was not passed the flag and compacted every minute whatever
// was asked.
func TestCompactBackground(t *testing.T) {
	m := newMount(t, "--compact-interval=200ms", "--compact-threshold=0.5", "--pack-bytes=1048576")
	for i := 0; i < 40; i++ {
		if err := os.WriteFile(m.path(fmt.Sprintf("c%d", i)), compactContent(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Counted before the removals: a pass may come between them (every
	// 200 ms), and nothing else lowers the count.
	packsBefore, _ := packUsage(t, m.store)
	for i := 0; i < 40; i++ {
		if i%4 != 0 {
			if err := os.Remove(m.path(fmt.Sprintf("c%d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
		if n, _ := packUsage(t, m.store); n < packsBefore && bytes.Contains(log, []byte("msg=compacted")) {
			break
		}
		if time.Now().After(deadline) {
			n, _ := packUsage(t, m.store)
			t.Fatalf("no background compaction in 20 s at --compact-interval=200ms: %d packs, %d before\n%s", n, packsBefore, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; i < 40; i += 4 {
		got, err := os.ReadFile(m.path(fmt.Sprintf("c%d", i)))
		if err != nil || !bytes.Equal(got, compactContent(i)) {
			t.Fatalf("c%d after background compaction: %v, or other bytes", i, err)
		}
	}
}
