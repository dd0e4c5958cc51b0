package store_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/store"
)

// The compaction crash test runs a child process (this test binary,
// dispatched by TestMain) in which one goroutine writes files into small
// shared packs and removes three of four at once, logging each file it
// keeps once its Put has returned ("E name seed size"), while another
// compacts at a low threshold without pause, logging each compaction that
// rewrote packs ("C"). The parent SIGKILLs the child at random moments;
// after each kill it opens the store, checks its invariants with every
// chunk verified, and checks that each kept file (those the parent wrote
// before the first run, and every one a child logged) reads back its
// bytes: a kill at any step of a compaction loses nothing live.

const compactCrashEnv = "KVFS_COMPACT_CRASH_CHILD"

const compactCrashPackBytes = 128 << 10

func compactCrashChild(dir, logPath, seed string) {
	n, _ := strconv.ParseUint(seed, 10, 64)
	var s *store.Store
	var err error
	for i := 0; i < 100; i++ {
		if s, err = store.Open(dir, store.Options{LockTimeout: 2 * time.Second, PackBytes: compactCrashPackBytes}); err == nil {
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
	go func() {
		for {
			res, err := s.Compact(context.Background(), store.CompactOptions{Threshold: 0.2})
			if err != nil {
				fmt.Fprintln(os.Stderr, "compact:", err)
				os.Exit(3)
			}
			if res.PacksRewritten > 0 {
				log.WriteString("C\n")
			}
		}
	}()
	r := rand.New(rand.NewPCG(n, 5))
	for i := 0; ; i++ {
		name := fmt.Sprintf("c%d-%d", n%1_000_000, i)
		k, size := r.Uint64(), 4096+r.IntN(40_000)
		b := randBytes(size, k)
		if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(size), name, store.PutOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, "put:", err)
			os.Exit(3)
		}
		if i%4 == 0 {
			log.WriteString(fmt.Sprintf("E %s %d %d\n", name, k, size))
			continue
		}
		if err := s.Remove(name); err != nil {
			fmt.Fprintln(os.Stderr, "remove:", err)
			os.Exit(3)
		}
	}
}

// TestCrashCompaction: see compactCrashChild.
func TestCrashCompaction(t *testing.T) {
	kills := 20 // 100 with KVFS_STRESS=full (scripts/test --long)
	if testutil.StressFull() {
		kills = 100
	}
	dir := filepath.Join(t.TempDir(), "store")
	if err := store.Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	type kept struct {
		seed uint64
		size int
	}
	keep := map[string]kept{}
	// The first files: interleaved with files removed at once, so that
	// the first compaction has their packs to rewrite.
	s, err := store.Open(dir, store.Options{PackBytes: compactCrashPackBytes})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("keep%02d", i)
		keep[name] = kept{uint64(i) + 77, 8000 + i*500}
		put(t, s, name, randBytes(keep[name].size, keep[name].seed))
		put(t, s, "tmp", randBytes(30_000, uint64(i)+900))
		if err := s.Remove("tmp"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	compactions := 0
	// Until a kill has come after a compaction that rewrote packs, the
	// runs go on (up to three times as many), with later kills: a child
	// built with the race detector may start too slowly for the first
	// ones to reach a compaction.
	for run := 0; run < kills || (compactions == 0 && run < 3*kills); run++ {
		delay := time.Duration(30+r.IntN(270)) * time.Millisecond
		if run >= kills {
			delay += 500 * time.Millisecond
		}
		logPath, stderr := killChild(t, compactCrashEnv, dir, r.Uint64(), delay)
		if strings.TrimSpace(stderr) != "" {
			t.Fatalf("run %d: child failed: %s", run, stderr)
		}
		if f, err := os.Open(logPath); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				switch {
				case len(fields) == 1 && fields[0] == "C":
					compactions++
				case len(fields) == 4 && fields[0] == "E":
					k, _ := strconv.ParseUint(fields[2], 10, 64)
					size, _ := strconv.Atoi(fields[3])
					keep[fields[1]] = kept{k, size}
				}
			}
			f.Close()
		}
		s, err := store.Open(dir, store.Options{LockTimeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("run %d: open after kill: %v", run, err)
		}
		if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
			s.Close()
			if d := os.Getenv("KVFS_COMPACT_CRASH_KEEP"); d != "" {
				exec.Command("cp", "-a", dir, d).Run()
			}
			t.Fatalf("run %d: after kill: %v", run, err)
		}
		for name, k := range keep {
			if got := get(t, s, name); !bytes.Equal(got, randBytes(k.size, k.seed)) {
				s.Close()
				t.Fatalf("run %d: %s lost or changed by a kill during compaction", run, name)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if compactions == 0 {
		t.Fatal("no compaction rewrote a pack in any run: the kills hit nothing")
	}
	t.Logf("%d kills or more, %d compactions that rewrote packs, %d files checked", kills, compactions, len(keep))
}
