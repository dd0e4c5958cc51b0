package journal

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAppendReplayReopen: records across many segments replay in order,
// before and after reopen, and numbering goes on after reopen.
func TestAppendReplayReopen(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	seqs := appendN(t, j, 0, 2000, false)
	if seqs[0] != 1 || seqs[len(seqs)-1] != 2000 {
		t.Fatalf("sequence numbers %d..%d", seqs[0], seqs[len(seqs)-1])
	}
	checkRecords(t, replayAll(t, j, 0), 1, 0, 2000)
	checkRecords(t, replayAll(t, j, 1500), 1501, 1500, 500)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(liveSegFiles(t, dir)); n < 4 {
		t.Fatalf("%d live segments: the test should span several", n)
	}
	j = mustOpen(t, dir, testOptions(nil))
	checkRecords(t, replayAll(t, j, 0), 1, 0, 2000)
	appendN(t, j, 2000, 10, true)
	// Unsynced records are written by Close.
	if _, err := j.Append(payloadFor(2010)); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = mustOpen(t, dir, testOptions(nil))
	defer j.Close()
	checkRecords(t, replayAll(t, j, 0), 1, 0, 2011)
	if _, err := j.Append(make([]byte, j.opts.MaxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized append: %v", err)
	}
	if err := j.Sync(j.Stats().Next); !errors.Is(err, ErrNotAppended) {
		t.Fatalf("sync of a future seq: %v", err)
	}
}

// TestBufferBound: appends without Sync are written out once the buffer
// passes BufferSize, so memory stays bounded; Replay sees them.
func TestBufferBound(t *testing.T) {
	o := testOptions(nil)
	o.BufferSize = 4096
	j := mustOpen(t, t.TempDir(), o)
	defer j.Close()
	for i := range 500 {
		if _, err := j.Append(payloadFor(i)); err != nil {
			t.Fatal(err)
		}
		j.mu.Lock()
		n := len(j.buf)
		j.mu.Unlock()
		if n >= o.BufferSize {
			t.Fatalf("buffer holds %d bytes after append %d", n, i)
		}
	}
	checkRecords(t, replayAll(t, j, 0), 1, 0, 500)
}

// TestGroupCommit: N goroutines each append and sync; their syncs share
// fdatasyncs (fewer than N), every record is durable, and a Sync of a
// durable record issues none.
func TestGroupCommit(t *testing.T) {
	const n = 64
	var calls atomic.Int64
	o := testOptions(nil)
	o.SyncFile = func(f *os.File) error {
		calls.Add(1)
		time.Sleep(2 * time.Millisecond) // a disk's flush latency
		return fdatasync(f)
	}
	dir := t.TempDir()
	j := mustOpen(t, dir, o)
	base := j.Stats().Syncs
	start := make(chan struct{})
	var wg sync.WaitGroup
	seqs := make([]uint64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			seq, err := j.Append(payloadFor(i))
			if err == nil {
				err = j.Sync(seq)
			}
			seqs[i], errs[i] = seq, err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	st := j.Stats()
	syncs := st.Syncs - base
	t.Logf("%d writers, %d fdatasyncs", n, syncs)
	if syncs >= n || syncs == 0 {
		t.Fatalf("%d fdatasyncs for %d writers: no group commit", syncs, n)
	}
	if st.Durable != n {
		t.Fatalf("durable %d, want %d", st.Durable, n)
	}
	before := calls.Load()
	for _, s := range seqs {
		if err := j.Sync(s); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != before {
		t.Fatal("a Sync of a durable record issued an fdatasync")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = mustOpen(t, dir, testOptions(nil))
	defer j.Close()
	got := replayAll(t, j, 0)
	if len(got) != n {
		t.Fatalf("%d records after reopen", len(got))
	}
}

// TestSyncFailurePoisons: once an fdatasync fails, that Sync and every
// later Append and Sync fail with the cause (fsyncgate: a retried
// fdatasync may succeed for pages the kernel already dropped).
func TestSyncFailurePoisons(t *testing.T) {
	var fail atomic.Bool
	o := testOptions(nil)
	o.SyncFile = func(f *os.File) error {
		if fail.Load() {
			return syscall.EIO
		}
		return fdatasync(f)
	}
	j := mustOpen(t, t.TempDir(), o)
	defer j.Close()
	seqs := appendN(t, j, 0, 3, true)
	fail.Store(true)
	seq, err := j.Append(payloadFor(3))
	if err != nil {
		t.Fatal(err)
	}
	err = j.Sync(seq)
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), ".seg") {
		t.Fatalf("failed sync: %v", err)
	}
	fail.Store(false) // the disk "recovers": the journal must not
	if err := j.Sync(seq); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync after a failure: %v", err)
	}
	if err := j.Sync(seqs[0]); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync of an earlier record after a failure: %v", err)
	}
	if _, err := j.Append(payloadFor(4)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after a failure: %v", err)
	}
	if err := j.Truncate(1); !errors.Is(err, ErrFailed) {
		t.Fatalf("Truncate after a failure: %v", err)
	}
}

// TestTruncateReopen: Truncate frees whole segments (kept for reuse up to
// MaxFree, the rest deleted), later appends recycle them, and after
// reopen every record above the truncation point replays.
func TestTruncateReopen(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	appendN(t, j, 0, 3000, false)
	live := len(j.chain)
	if err := j.Truncate(2500); err != nil {
		t.Fatal(err)
	}
	if len(j.chain) >= live || j.chain[0].firstSeq > 2501 {
		t.Fatalf("Truncate(2500): %d live segments (was %d), first seq %d", len(j.chain), live, j.chain[0].firstSeq)
	}
	if len(j.free) > j.opts.MaxFree {
		t.Fatalf("%d free segments kept", len(j.free))
	}
	// Recycle: the free segments take the next records.
	freed := map[string]bool{}
	for _, s := range j.free {
		freed[s.path] = true
	}
	appendN(t, j, 3000, 1000, false)
	reused := false
	for _, s := range j.chain {
		reused = reused || freed[s.path]
	}
	if !reused {
		t.Fatal("no freed segment was reused")
	}
	if err := j.Truncate(3990); err != nil {
		t.Fatal(err)
	}
	bound := len(j.chain) + j.opts.MaxFree + 1 // live, kept free, one made ahead
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n > bound {
		t.Fatalf("%d segment files after recycling, want at most %d", n, bound)
	}
	j = mustOpen(t, dir, testOptions(nil))
	defer j.Close()
	got := replayAll(t, j, 3990)
	checkRecords(t, got, 3991, 3990, 10)
	all := replayAll(t, j, 0)
	if first := all[0].seq; first > 3991 {
		t.Fatalf("first replayed seq %d", first)
	}
	checkRecords(t, all, all[0].seq, int(all[0].seq-1), len(all))
	if seq := appendN(t, j, 4000, 1, true)[0]; seq != 4001 {
		t.Fatalf("next seq after reopen %d", seq)
	}
}

// TestSwitchSyncsOldSegment: moving to a new segment fdatasyncs the old
// one first, even when no Sync was asked for (a header on disk must prove
// the records before it durable), and Open fdatasyncs what it recovered
// (after a process kill it may be in the page cache only).
func TestSwitchSyncsOldSegment(t *testing.T) {
	var mu sync.Mutex
	synced := map[*os.File]int{}
	o := testOptions(nil)
	o.BufferSize = 4096
	o.MaxFree = 100
	o.SyncFile = func(f *os.File) error {
		mu.Lock()
		synced[f]++
		mu.Unlock()
		return fdatasync(f)
	}
	dir := t.TempDir()
	// Make free segments to recycle, so that no segment creation (which
	// syncs too) happens below.
	j := mustOpen(t, dir, o)
	appendN(t, j, 0, 3000, false)
	if err := j.Truncate(3000); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(synced)
	mu.Unlock()
	j = mustOpen(t, dir, o)
	defer j.Close()
	mu.Lock()
	if head := j.chain[len(j.chain)-1]; synced[head.f] == 0 {
		t.Fatal("Open did not fdatasync the recovered segment")
	}
	clear(synced)
	mu.Unlock()
	if len(j.free) < 3 {
		t.Fatalf("%d free segments", len(j.free))
	}
	for i := range 1500 {
		if _, err := j.Append(payloadFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(j.chain) < 3 {
		t.Fatalf("%d segments", len(j.chain))
	}
	for _, s := range j.chain[:len(j.chain)-1] {
		if synced[s.f] == 0 {
			t.Fatalf("%s was left for %s without an fdatasync", s.path, j.chain[len(j.chain)-1].path)
		}
	}
}

// TestOnSync: each group commit that makes records durable reports its
// duration once; a Sync of records already durable, and a failed sync,
// report nothing.
func TestOnSync(t *testing.T) {
	var calls atomic.Int64
	var total atomic.Int64
	fail := atomic.Bool{}
	o := testOptions(nil)
	o.OnSync = func(d time.Duration) {
		calls.Add(1)
		total.Add(int64(d))
	}
	o.SyncFile = func(f *os.File) error {
		if fail.Load() {
			return syscall.EIO
		}
		return f.Sync()
	}
	j := mustOpen(t, t.TempDir(), o)
	defer j.Close()
	base := calls.Load() // recovery at open syncs without a group commit
	seq, err := j.Append(payloadFor(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Sync(seq); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load() - base; n != 1 || total.Load() <= 0 {
		t.Fatalf("one group commit reported %d times, %v in all", n, time.Duration(total.Load()))
	}
	if err := j.Sync(seq); err != nil { // durable already
		t.Fatal(err)
	}
	if n := calls.Load() - base; n != 1 {
		t.Fatalf("a sync of durable records reported: %d calls", n)
	}
	// Concurrent committers share group commits: fewer reports than
	// syncs, at least one.
	var wg sync.WaitGroup
	before := calls.Load()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := j.Append(payloadFor(10 + i))
			if err == nil {
				err = j.Sync(s)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load() - before; n < 1 || n > 8 {
		t.Fatalf("8 concurrent syncs reported %d group commits", n)
	}
	fail.Store(true)
	before = calls.Load()
	if s, err := j.Append(payloadFor(99)); err != nil {
		t.Fatal(err)
	} else if err := j.Sync(s); err == nil {
		t.Fatal("sync succeeded with a failing fdatasync")
	}
	if n := calls.Load() - before; n != 0 {
		t.Fatalf("a failed sync reported %d times", n)
	}
}
