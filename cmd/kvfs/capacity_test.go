package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/store"
)

// randomFile writes n random bytes (no zeros to spare, nothing to
// share) to a fresh file and returns its path.
func randomFile(t *testing.T, n int, seed uint64) string {
	t.Helper()
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.IntN(255) + 1)
	}
	p := filepath.Join(t.TempDir(), fmt.Sprintf("r%d", seed))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func storeStats(t *testing.T, st string) store.Stats {
	t.Helper()
	var s store.Stats
	if err := json.Unmarshal([]byte(mustRun(t, "stats", "--json", st)), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOfflineCapacity: the store's capacity holds for the offline
// commands too, as the daemon applies it when mounted. kvfs put into an
// unmounted store over its capacity evicts (least recently used first,
// down to the low-water mark) and says what; the file just put is never
// the one evicted, and a file larger than the capacity on its own is
// kept, with a warning. kvfs gc evicts too before compacting (a capacity
// lowered offline by kvfs config is applied there). Pinned files stay.
func TestOfflineCapacity(t *testing.T) {
	const kib = 1 << 10
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", st)
	if out := mustRun(t, "config", st, "capacity=1M"); !strings.Contains(out, "capacity=1048576") {
		t.Fatalf("config: %s", out)
	}
	for i := range 4 { // 1 MiB: at the capacity, not over it
		if out := mustRun(t, "put", st, randomFile(t, 256*kib, uint64(i)), fmt.Sprintf("f%d", i)); strings.Contains(out, "evicted") {
			t.Fatalf("put %d, under the capacity, evicted: %s", i, out)
		}
	}
	mustRun(t, "pin", "--store", st, "f0")
	// 1.25 MiB: over; down to 90% of 1 MiB (921.6 KiB) takes two files,
	// the least recently used that are not pinned: f1 and f2.
	out := mustRun(t, "put", st, randomFile(t, 256*kib, 4), "f4")
	if !strings.Contains(out, "evicted 2 file(s) (512.0 KiB)") || !strings.Contains(out, "capacity 1.0 MiB") {
		t.Fatalf("put over the capacity: %s", out)
	}
	s := storeStats(t, st)
	if s.StoredBytes > 1<<20 || s.Files != 3 {
		t.Fatalf("after the put over the capacity: %d files, %d bytes stored; want 3 under %d", s.Files, s.StoredBytes, 1<<20)
	}
	for _, f := range []string{"f0", "f3", "f4"} {
		mustRun(t, "ls", st, f)
	}

	// A file larger than the capacity alone: kept, the others (but the
	// pinned one) evicted, and a warning.
	code, out, errOut := runCmd("put", st, randomFile(t, 1536*kib, 5), "big")
	if code != exitOK {
		t.Fatalf("put of a file larger than the capacity: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "evicted 2 file(s)") || !strings.Contains(errOut, "big alone") || !strings.Contains(errOut, "larger than the capacity") {
		t.Fatalf("put of a file larger than the capacity:\n%s%s", out, errOut)
	}
	if out := mustRun(t, "ls", st); out != "big\nf0\n" {
		t.Fatalf("after the put of a file larger than the capacity: %q", out)
	}
	mustRun(t, "rm", st, "big")

	// kvfs gc: a capacity lowered offline is applied by the next gc.
	mustRun(t, "unpin", "--store", st, "f0")
	for i := range 3 {
		mustRun(t, "put", st, randomFile(t, 256*kib, uint64(10+i)), fmt.Sprintf("g%d", i))
	}
	mustRun(t, "config", st, "capacity=600K")
	if s := storeStats(t, st); s.StoredBytes <= 600*kib {
		t.Fatalf("stored %d after lowering the capacity offline; the test wants it over", s.StoredBytes)
	}
	out = mustRun(t, "gc", st)
	if !strings.Contains(out, "evicted 2 file(s) (512.0 KiB)") || !strings.Contains(out, "rewrote") {
		t.Fatalf("gc over the capacity: %s", out)
	}
	if s := storeStats(t, st); s.StoredBytes > 600*kib || s.Files != 2 {
		t.Fatalf("after gc: %d files, %d bytes stored; want 2 under %d", s.Files, s.StoredBytes, 600*kib)
	}
	if out := mustRun(t, "gc", st); strings.Contains(out, "evicted") {
		t.Fatalf("gc under the capacity evicted: %s", out)
	}
}
