package store_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/store"
)

// The eviction crash test runs a child process (this test binary,
// dispatched by TestMain) over a store with a small capacity: one
// goroutine writes prefix-growth series (snapshot k of a series is the
// first evictCrashSize(k) bytes of one stream, so snapshots share their
// leading chunks), logging each file once its Put has returned ("P name
// seed size"), while another runs eviction (gc.Evict) without pause,
// logging each file it evicted ("X name") from the OnEvict hook, after
// the eviction committed. Background compaction runs too, at a low
// threshold, as in a daemon. The parent SIGKILLs the child at random
// moments; after each kill it opens the store and checks: fsck finds no
// problem (every chunk verified); every pinned file (pinned before the
// first run) is there whole; every file logged is either there and reads
// back its bytes exactly, or gone whole (an eviction is one transaction:
// no half-removed file); and the files gone without an X logged number at
// most one eviction batch, those whose eviction committed just before the
// kill.

const evictCrashEnv = "KVFS_EVICT_CRASH_CHILD"

const evictCrashPackBytes = 128 << 10

// evictCrashSize is the size of snapshot k of a series.
func evictCrashSize(k int) int { return (k+1)*16384 + 1234 }

func evictCrashChild(dir, logPath, seed string) {
	n, _ := strconv.ParseUint(seed, 10, 64)
	var s *store.Store
	var err error
	for i := 0; i < 100; i++ {
		if s, err = store.Open(dir, store.Options{LockTimeout: 2 * time.Second, PackBytes: evictCrashPackBytes}); err == nil {
			break
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		os.Exit(2)
	}
	s.OnEvict(func(e store.Evicted) { log.WriteString("X " + strings.TrimPrefix(e.Path, "/") + "\n") })
	go func() {
		for {
			if _, err := gc.Evict(s); err != nil {
				fmt.Fprintln(os.Stderr, "evict:", err)
				os.Exit(3)
			}
		}
	}()
	go func() {
		for {
			if _, err := s.Compact(context.Background(), store.CompactOptions{Threshold: 0.3}); err != nil {
				fmt.Fprintln(os.Stderr, "compact:", err)
				os.Exit(3)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	r := rand.New(rand.NewPCG(n, 5))
	for i := 0; ; i++ {
		k := r.Uint64()
		for step := 0; step < 6; step++ {
			name := fmt.Sprintf("e%d-%d-%d", n%1_000_000, i, step)
			size := evictCrashSize(step)
			if _, _, err := s.Put(context.Background(), bytes.NewReader(randBytes(size, k)), int64(size), name, store.PutOptions{}); err != nil {
				fmt.Fprintln(os.Stderr, "put:", err)
				os.Exit(3)
			}
			log.WriteString(fmt.Sprintf("P %s %d %d\n", name, k, size))
		}
	}
}

// TestCrashEviction: see evictCrashChild.
func TestCrashEviction(t *testing.T) {
	kills := 20 // 100 with KVFS_STRESS=full (scripts/test --long)
	if testutil.StressFull() {
		kills = 100
	}
	dir := filepath.Join(t.TempDir(), "store")
	if err := store.Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	type file struct {
		seed uint64
		size int
	}
	s, err := store.Open(dir, store.Options{PackBytes: evictCrashPackBytes})
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]file{}
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("pinned%d", i)
		pinned[name] = file{uint64(i) + 1000, evictCrashSize(i % 6)}
		put(t, s, name, randBytes(pinned[name].size, pinned[name].seed))
		if err := s.KeepPath(name, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetSettings(map[string]string{"capacity": "1M"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	gone := map[string]bool{} // evicted, as the child logged or as found
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	evictions, unlogged, maxUnlogged := 0, 0, 0
	for run := 0; run < kills; run++ {
		logPath, stderr := killChild(t, evictCrashEnv, dir, r.Uint64(), time.Duration(50+r.IntN(400))*time.Millisecond)
		if strings.TrimSpace(stderr) != "" {
			t.Fatalf("run %d: child failed: %s", run, stderr)
		}
		if f, err := os.Open(logPath); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				switch {
				case len(fields) == 2 && fields[0] == "X":
					gone[fields[1]] = true
					evictions++
				case len(fields) == 4 && fields[0] == "P":
					k, _ := strconv.ParseUint(fields[2], 10, 64)
					size, _ := strconv.Atoi(fields[3])
					files[fields[1]] = file{k, size}
				}
			}
			f.Close()
		}
		s, err := store.Open(dir, store.Options{LockTimeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("run %d: open after kill: %v", run, err)
		}
		problems, err := s.Problems(context.Background(), store.CheckOptions{Verify: true})
		if err != nil || len(problems) > 0 {
			s.Close()
			t.Fatalf("run %d: fsck after a kill during eviction: %v %v", run, err, problems)
		}
		read := func(name string) ([]byte, error) {
			f, err := s.Open(name)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			b := make([]byte, f.Size())
			_, err = f.ReadAt(b, 0)
			return b, err
		}
		for name, f := range pinned {
			if got, err := read(name); err != nil || !bytes.Equal(got, randBytes(f.size, f.seed)) {
				s.Close()
				t.Fatalf("run %d: pinned %s evicted or changed (%v)", run, name, err)
			}
		}
		lost := 0
		for name, f := range files {
			if gone[name] {
				if _, err := s.Stat(name); !isNotFound(err) {
					s.Close()
					t.Fatalf("run %d: %s was evicted but is still there (%v)", run, name, err)
				}
				continue
			}
			got, err := read(name)
			switch {
			case isNotFound(err):
				// Evicted in the killed run, its X not logged yet.
				gone[name] = true
				lost++
			case err != nil:
				s.Close()
				t.Fatalf("run %d: %s: %v", run, name, err)
			case !bytes.Equal(got, randBytes(f.size, f.seed)):
				s.Close()
				t.Fatalf("run %d: %s changed by a kill during eviction", run, name)
			}
		}
		if lost > 64 { // store.evictBatch: one transaction's files
			s.Close()
			t.Fatalf("run %d: %d files gone with no eviction logged, more than one eviction batch", run, lost)
		}
		unlogged += lost
		maxUnlogged = max(maxUnlogged, lost)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if evictions == 0 {
		t.Fatal("no file evicted in any run: the kills hit nothing")
	}
	t.Logf("%d kills, %d files written, %d evicted (logged), %d evicted in the instant before a kill (at most %d in one run)", kills, len(files), evictions, unlogged, maxUnlogged)
}

// isNotFound: the store's "no such file", however wrapped.
func isNotFound(err error) bool {
	return err != nil && errors.Is(err, fs.ErrNotExist)
}
