package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
)

// TestAppendPacksBounded: more concurrent ingests than packs stay open
// share maxAppendPacks packs; afterwards at most maxAppendPacks appenders
// (descriptors) stay open, none in use, and the next ingest appends to one
// of them.
func TestAppendPacksBounded(t *testing.T) {
	s, dir := newTestStore(t)
	const n = 3 * maxAppendPacks
	var arrived sync.WaitGroup
	arrived.Add(n)
	s.beforeCommit = func() { arrived.Done(); arrived.Wait() } // all hold ranges at once
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := bytes.Repeat([]byte{byte(i)}, 3000) // one new chunk each
			if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), fmt.Sprint("f", i), PutOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	open, byPack, held := len(s.appending.open), len(s.appending.byPack), len(s.held)
	users := 0
	for _, sp := range s.appending.byPack {
		users += sp.users
	}
	s.mu.Unlock()
	if open > maxAppendPacks || byPack != open || held != open || users != 0 {
		t.Fatalf("%d packs open for appending, %d with appenders, %d held, %d users, after %d concurrent ingests; want at most %d, all open and idle",
			open, byPack, held, users, n, maxAppendPacks)
	}
	packs, _ := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	if len(packs) > maxAppendPacks {
		t.Fatalf("%d packs for %d concurrent one-chunk ingests; want at most %d", len(packs), n, maxAppendPacks)
	}
	s.beforeCommit = nil
	b := bytes.Repeat([]byte("x"), 3000)
	if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), "g", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := filepath.Glob(filepath.Join(dir, "packs", "*.pack")); len(again) != len(packs) {
		t.Fatalf("%d packs after one more ingest, want the %d open ones", len(again), len(packs))
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestCover: the committed length and dead count that a commit records
// over ranges of other ingests, committed before or after it, or never.
func TestCover(t *testing.T) {
	r := func(off, n int64) blockstore.Loc { return blockstore.Loc{Off: off, Len: n} }
	for _, c := range []struct {
		name              string
		committed         int64
		ranges            []blockstore.Loc
		wantLen, wantDead int64
		wantErr           bool
	}{
		{"first", 0, []blockstore.Loc{r(0, 10), r(10, 5)}, 15, 0, false},
		{"others in flight below", 10, []blockstore.Loc{r(30, 10)}, 40, 20, false},
		{"covered by a later commit", 40, []blockstore.Loc{r(10, 20)}, 40, -20, false},
		{"covered and above", 40, []blockstore.Loc{r(10, 20), r(50, 10)}, 60, -20 + 10, false},
		{"nothing of its own", 40, nil, 40, 0, false},
		{"straddles", 40, []blockstore.Loc{r(30, 20)}, 0, 0, true},
	} {
		gotLen, gotDead, err := cover(c.committed, c.ranges)
		if (err != nil) != c.wantErr || err == nil && (gotLen != c.wantLen || gotDead != c.wantDead) {
			t.Errorf("%s: cover(%d, %v) = %d, %d, %v; want %d, %d, error %v", c.name, c.committed, c.ranges, gotLen, gotDead, err, c.wantLen, c.wantDead, c.wantErr)
		}
	}
}

// TestSharedPackCrashWithRangeInFlight: ingest A has written its range of
// a shared pack but not committed when ingest B, which reserved after it,
// commits and records a committed length covering A's range. A copy of the
// store taken then (what a crash leaves: B's fsyncs and index commit are
// on disk, A's commit is not) opens, checks clean and holds B; the live
// store, once A commits too, holds both and checks clean.
func TestSharedPackCrashWithRangeInFlight(t *testing.T) {
	s, dir := newTestStore(t)
	s.appendPacks = 1 // B shares A's pack
	ctx := context.Background()
	a, b := randBytes(40000, 1), randBytes(30000, 2)
	aWritten, bDone := make(chan struct{}), make(chan struct{})
	s.beforeCommit = func() {
		s.beforeCommit = nil // B's commit goes straight through
		close(aWritten)
		<-bDone
	}
	errA := make(chan error)
	go func() {
		_, _, err := s.Put(ctx, bytes.NewReader(a), int64(len(a)), "a", PutOptions{})
		errA <- err
	}()
	<-aWritten
	if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "b", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(dir, "packs", "*.pack"))
	if len(packs) != 1 {
		t.Fatalf("%d packs, want A and B in one", len(packs))
	}
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyDir(t, dir, crashed)
	close(bDone)
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"a": a, "b": b} {
		if got := readAll(t, s, name); !bytes.Equal(got, want) {
			t.Fatalf("%s reads back wrong", name)
		}
	}
	if err := s.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}

	c, err := Open(crashed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c, "b"); !bytes.Equal(got, b) {
		t.Fatal("b reads back wrong after the crash")
	}
	if _, err := c.Stat("a"); err == nil {
		t.Fatal("a, never committed, exists after the crash")
	}
	st, _ := c.Stats()
	// B's range starts on the page after A's.
	if st.DeadBytes != 40960 {
		t.Fatalf("%d dead bytes after the crash; want A's 40000 and 960 to the next page", st.DeadBytes)
	}
	// New commits append to the pack again; removing B leaves it all
	// dead, and it goes.
	d := randBytes(20000, 3)
	if _, _, err := c.Put(ctx, bytes.NewReader(d), int64(len(d)), "d", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("d"); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(crashed, "packs", "*.pack")); len(left) != 0 {
		t.Fatalf("packs %v left with no file", left)
	}
	if err := c.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// copyDir copies the store's index, journal and packs, as a crash would
// leave them (the spool is emptied at open anyway).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	for _, sub := range []string{"", "packs", "spool", "journal"} {
		if err := os.MkdirAll(filepath.Join(to, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range append(append([]string{"kvfs.db"}, globRel(t, from, "packs/*.pack")...), globRel(t, from, "journal/*")...) {
		b, err := os.ReadFile(filepath.Join(from, p))
		if os.IsNotExist(err) && filepath.Dir(p) == "journal" {
			continue // a segment the journal was making in the background
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, p), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func globRel(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range m {
		m[i], _ = filepath.Rel(dir, p)
	}
	return m
}
