//go:build linux

package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/internal/testutil"
)

// The stress test's files are prefix-growth series: writer w's series s
// is one stream of bytes, and its snapshot k the first gcSize(w, k) of
// it, so the snapshots of a series share their leading chunks (as an
// engine's snapshots of a growing conversation do) and removing or
// evicting one frees only its unshared tail. A file's bytes follow from
// its name ("s<S>-k<K>" in directory "w<W>"), so a reader in another
// process can check them.
const (
	gcWriters  = 4
	gcSteps    = 8         // snapshots per series
	gcStep     = 256 << 10 // growth per snapshot, a multiple of the chunk size
	gcCapacity = "12M"
)

func gcSize(w, k int) int { return (k+1)*gcStep + 777 + 1000*w }

// gcContent is the content of snapshot k of writer w's series s.
func gcContent(w, s, k int) []byte {
	var seed [32]byte
	copy(seed[:], fmt.Sprintf("gcstress w%d s%d", w, s))
	b := make([]byte, gcSize(w, k))
	rand.NewChaCha8(seed).Read(b)
	return b
}

// gcParse reads w, s and k back from a file's path.
func gcParse(path string) (w, s, k int, ok bool) {
	dir, name := filepath.Base(filepath.Dir(path)), filepath.Base(path)
	if _, err := fmt.Sscanf(dir, "w%d", &w); err != nil {
		return 0, 0, 0, false
	}
	if _, err := fmt.Sscanf(name, "s%d-k%d", &s, &k); err != nil {
		return 0, 0, 0, false
	}
	return w, s, k, true
}

func init() {
	// gcread SECONDS MNT: until SECONDS pass, opens random files of the
	// stress test's writers (a file removed or evicted before the open is
	// skipped), and through the open descriptor, its page cache dropped
	// each time so the daemon serves the read, reads at random unaligned
	// offsets, a few milliseconds apart (compaction moves chunks under
	// it), and checks every byte. Once open, a file must read whole
	// whatever happens to its name. Prints "ok FILES READS BYTES".
	clients["gcread"] = func(args []string) error {
		secs, _ := strconv.Atoi(args[0])
		mnt := args[1]
		r := rand.New(rand.NewPCG(uint64(os.Getpid()), 9))
		deadline := time.Now().Add(time.Duration(secs) * time.Second)
		var files, reads, nbytes int64
		for time.Now().Before(deadline) {
			dir := filepath.Join(mnt, fmt.Sprintf("w%d", r.IntN(gcWriters)))
			ents, err := os.ReadDir(dir)
			if err != nil {
				return fmt.Errorf("readdir %s: %w", dir, err)
			}
			var names []string
			for _, e := range ents {
				if !strings.HasPrefix(e.Name(), ".") {
					names = append(names, e.Name())
				}
			}
			if len(names) == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			p := filepath.Join(dir, names[r.IntN(len(names))])
			w, s, k, ok := gcParse(p)
			if !ok {
				return fmt.Errorf("%s: not a stress file", p)
			}
			f, err := os.Open(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed or evicted since the listing
			}
			if err != nil {
				return fmt.Errorf("open %s: %w", p, err)
			}
			want := gcContent(w, s, k)
			fi, err := f.Stat()
			if err != nil || fi.Size() != int64(len(want)) {
				f.Close()
				return fmt.Errorf("stat %s: size %v, want %d (%v)", p, fi.Size(), len(want), err)
			}
			files++
			for i := 0; i < 6; i++ {
				unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				off := r.IntN(len(want))
				n := min(len(want)-off, 1+r.IntN(300_000))
				if i == 0 {
					off, n = 0, len(want)
				}
				buf := make([]byte, n)
				if _, err := f.ReadAt(buf, int64(off)); err != nil {
					f.Close()
					return fmt.Errorf("read %s [%d,+%d): %w", p, off, n, err)
				}
				if !bytes.Equal(buf, want[off:off+n]) {
					f.Close()
					return fmt.Errorf("%s [%d,+%d): wrong bytes", p, off, n)
				}
				reads++
				nbytes += int64(n)
				time.Sleep(time.Duration(r.IntN(15)) * time.Millisecond)
			}
			f.Close()
		}
		fmt.Println("ok", files, reads, nbytes)
		return nil
	}
}

// TestGCStress is issue 10's stress test, under -race the daemon too
// (TestMain builds kvfs with -race when the tests are): through a mount,
// 4 writers ingest prefix-growth series, 2 removers remove random
// snapshots, the daemon compacts every 50 ms (background compaction,
// threshold 0.2), a capacity of 12 MiB makes eviction run all the time,
// and 2 reader processes check bytes at unaligned offsets, for 60 s in
// CI's stress passes (briefly otherwise: testutil.StressDuration). At
// random moments kvfs fsck (and fsck --verify) checks the mounted store through the daemon and must find it clean. No read may
// fail or return a wrong byte (a file may vanish before it is opened:
// removal and eviction are allowed to take it); at the end every file
// left reads back whole, fsck --verify is clean mounted, and offline
// after the unmount (newMount's cleanup).
func TestGCStress(t *testing.T) {
	// At least 10 s: fsck runs every 1-5 s, and must run while busy.
	dur := max(testutil.StressDuration(t, 60*time.Second), 10*time.Second)
	// A race-built daemon (and reader) reports races to files here, not
	// to a stderr nobody reads; checked after the unmount (cleanups run
	// last first).
	raceLog := filepath.Join(t.TempDir(), "race")
	t.Setenv("GORACE", "log_path="+raceLog)
	t.Cleanup(func() {
		reports, _ := filepath.Glob(raceLog + ".*")
		for _, r := range reports {
			b, _ := os.ReadFile(r)
			t.Errorf("race report of a kvfs process (%s):\n%s", r, b)
		}
	})
	m := newMount(t, "--compact-interval", "50ms", "--compact-threshold", "0.2")
	kvfs(t, "config", m.store, "capacity="+gcCapacity)
	for w := 0; w < gcWriters; w++ {
		if err := os.Mkdir(m.path(fmt.Sprintf("w%d", w)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written, evictedEarly, removed, fscks atomic.Int64
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
	}
	for w := 0; w < gcWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := m.path(fmt.Sprintf("w%d", w))
			for s := 0; ; s++ {
				for k := 0; k < gcSteps; k++ {
					select {
					case <-stop:
						return
					default:
					}
					tmp := filepath.Join(dir, fmt.Sprintf(".t-s%d-k%d", s, k))
					if err := os.WriteFile(tmp, gcContent(w, s, k), 0o644); err != nil {
						fail("writer %d: %v", w, err)
						return
					}
					err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("s%d-k%d", s, k)))
					switch {
					case errors.Is(err, fs.ErrNotExist):
						evictedEarly.Add(1) // closed, idle: evicted before its rename
					case err != nil:
						fail("writer %d: %v", w, err)
						return
					default:
						written.Add(1)
					}
				}
			}
		}()
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 3))
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(10+r.IntN(30)) * time.Millisecond):
				}
				dir := m.path(fmt.Sprintf("w%d", r.IntN(gcWriters)))
				ents, err := os.ReadDir(dir)
				if err != nil {
					fail("remover: %v", err)
					return
				}
				if len(ents) == 0 {
					continue
				}
				e := ents[r.IntN(len(ents))]
				if strings.HasPrefix(e.Name(), ".") {
					continue
				}
				err = os.Remove(filepath.Join(dir, e.Name()))
				if err == nil {
					removed.Add(1)
				} else if !errors.Is(err, fs.ErrNotExist) {
					fail("remover: %v", err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1000+r.IntN(4000)) * time.Millisecond):
			}
			args := []string{m.store}
			if r.IntN(2) == 0 {
				args = []string{"--verify", m.store}
			}
			out, code := runFsck(t, args...)
			if code != 0 {
				fail("kvfs fsck %v of the busy mounted store: exit %d\n%s", args, code, out)
			}
			fscks.Add(1)
		}
	}()
	readers := make([]string, 2)
	var rwg sync.WaitGroup
	for i := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			out, err := client("gcread", fmt.Sprint(int(dur.Seconds())), m.mnt).CombinedOutput()
			if err != nil {
				fail("reader %d: %v\n%s", i, err, out)
			}
			readers[i] = strings.TrimSpace(string(out))
		}()
	}
	rwg.Wait() // the readers run for dur
	close(stop)
	wg.Wait()

	// Every file left reads back whole.
	left := 0
	for w := 0; w < gcWriters; w++ {
		dir := m.path(fmt.Sprintf("w%d", w))
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			w, s, k, ok := gcParse(p)
			if !ok {
				continue // a writer's temporary file, cut short by stop
			}
			got, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("read %s: %v", p, err)
			} else if err == nil && !bytes.Equal(got, gcContent(w, s, k)) {
				t.Errorf("%s: wrong bytes at the end", p)
			}
			left++
		}
	}
	if out, code := runFsck(t, "--verify", m.store); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("kvfs fsck --verify of the mounted store at the end: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		StoredBytes int64 `json:"storedBytes"`
		Evictions   struct {
			Files int64 `json:"files"`
		} `json:"evictions"`
		Compactions struct {
			Runs           int64 `json:"runs"`
			PacksRewritten int64 `json:"packsRewritten"`
			PacksDeleted   int64 `json:"packsDeleted"`
			BytesReclaimed int64 `json:"bytesReclaimed"`
		} `json:"compactions"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("stats %s: %v", b, err)
	}
	t.Logf("%v: %d snapshots written (%d more evicted before their rename), %d removed, %d evicted, %d left; %d fsck runs while busy; readers (files reads bytes): %q; compactions %+v; stored %d bytes",
		dur, written.Load(), evictedEarly.Load(), removed.Load(), st.Evictions.Files, left, fscks.Load(), readers, st.Compactions, st.StoredBytes)
	if st.Evictions.Files == 0 {
		t.Errorf("nothing evicted: the capacity did not bite (%s)", b)
	}
	if st.Compactions.Runs == 0 || st.Compactions.PacksDeleted == 0 {
		t.Errorf("compaction did not run or removed no pack: %s", b)
	}
	if fscks.Load() == 0 {
		t.Errorf("no fsck ran while the store was busy")
	}
}

// TestFsckMountedFault: kvfs fsck of a mounted store goes through the
// daemon; a byte flipped in a pack file under the running daemon is not
// seen by fsck without --verify (the range is neither punched nor outside
// its pack) and is found by fsck --verify (exit 1), naming the file that
// lists the chunk; fsck --repair of the mounted store is refused (exit 8)
// saying to unmount, and after the unmount fsck --repair marks the file
// damaged (exit 3).
func TestFsckMountedFault(t *testing.T) {
	m := newMount(t)
	src := filepath.Join(t.TempDir(), "f")
	randFile(t, src, 1<<20, 42)
	sh(t, fmt.Sprintf("cp %s %s && sync", src, m.path("victim")))
	if out := wantFsck(t, 0, "--verify", m.store); !strings.Contains(out, "clean") {
		t.Fatalf("fsck --verify of the mounted store: %s", out)
	}
	packs, err := filepath.Glob(filepath.Join(m.store, "packs", "*.pack"))
	if err != nil || len(packs) == 0 {
		t.Fatalf("no pack files (%v)", err)
	}
	var pack string
	for _, p := range packs {
		if fi, err := os.Stat(p); err == nil && fi.Size() >= 1<<20 {
			pack = p
		}
	}
	if pack == "" {
		t.Fatalf("no pack holds the file: %v", packs)
	}
	f, err := os.OpenFile(pack, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 300_001); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, 300_001); err != nil {
		t.Fatal(err)
	}
	f.Close()

	wantFsck(t, 0, m.store)
	out := wantFsck(t, 1, "--verify", m.store)
	if !strings.Contains(out, "/victim") || !strings.Contains(out, "lost") {
		t.Errorf("fsck --verify of the mounted store does not name the file and the loss:\n%s", out)
	}
	out = wantFsck(t, 8, "--repair", m.store)
	if !strings.Contains(out, "unmount") {
		t.Errorf("fsck --repair of the mounted store: %s", out)
	}
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	out = wantFsck(t, 3, "--verify", "--repair", m.store)
	if !strings.Contains(out, "marked damaged: /victim") {
		t.Errorf("fsck --repair offline: %s", out)
	}
	// The store is consistent again, but the file keeps its marked damage
	// (newMount's cleanup checks the invariants).
	wantFsck(t, 3, m.store)
}
