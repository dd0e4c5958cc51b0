//go:build linux && soak

package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSoak is the long run of issue 26 (scripts/soak; docs/RELIABILITY.md):
// for KVFS_SOAK_DURATION (default 1h), one daemon under a capacity small
// enough that eviction runs all the time, with background compaction and
// a short blob grace, serves
//
//   - engine writers (client processes): snapshots of growing
//     conversations in the blocks layout, several processes to a
//     namespace and conversations shared between them, so that blocks are
//     shared and skipped by the existence check; now and then the
//     engine's remove of an older snapshot and its collect (FORMAT.md §4.6);
//   - whole-layout writers (client processes), a few of whose files are
//     pinned (kvfs pin) and unpinned again;
//   - cp, mv and rm churn (coreutils);
//   - readers (client processes) verifying every byte of acknowledged
//     files by pread at unaligned offsets and by mmap, a manifest's blocks
//     too, and blocks snapshots through /.kvfs/whole;
//   - metrics scrapes, /.kvfs/stats reads and kvfs gc through the socket;
//
// and every KVFS_SOAK_KILL_EVERY the daemon is killed with SIGKILL in the
// middle of all that and mounted again. At the end every acknowledged file
// is verified once more, the store is unmounted and kvfs fsck --verify
// must be clean.
//
// A file is acknowledged once the call that made it durable returned: the
// writer's fsync and rename, cp's exit, mv's exit for its new name. The
// soak fails on any wrong byte; on an acknowledged file gone that neither
// the soak removed nor the daemon evicted (its log's "evicted" lines); on
// a pinned file evicted; on a manifest that exists while a block it lists
// does not resolve (an acknowledged snapshot must stay restorable); on an
// error no kill explains; and on the daemon's RSS or descriptor count
// growing by more than 20% (soakGrowth).
//
// Operations run under s.gate held shared; the killer sends SIGKILL
// without it (so that kills land mid-operation), then takes it exclusively
// to unmount and mount again. An operation that overlapped a kill may fail
// any way except with wrong bytes; a write it interrupted is settled after
// the remount (the file adopted if it exists, after verifying it).
func TestSoak(t *testing.T) {
	requireRoot(t)
	cfg := soakConfigFromEnv(t)
	s := newSoakRun(t, cfg)
	s.run()
}

// soakConfig is a run's parameters; the intervals scale down for short
// runs (scripts/soak --duration 2m).
type soakConfig struct {
	duration time.Duration
	// warmup: a daemon's first minutes, whose resource samples never
	// fail (10 min, 1/6 of a shorter run); settle: the window of the
	// resource medians (1 min; 1/12 of a shorter run, at least 30 s).
	warmup, settle time.Duration
	killEvery      time.Duration // 0: no kills
	sample         time.Duration // resource samples
	progress       time.Duration // progress lines
	scrape         time.Duration // metrics scrapes
	blobGrace      time.Duration // --blob-grace
	compactEvery   time.Duration // --compact-interval
	gcEvery        time.Duration // kvfs gc through the socket
	capacity       string        // --capacity
	writers        int           // blocks-layout writer processes
	wholeWriters   int           // whole-layout writer processes
	readers        int           // reader processes
	seed           uint64
	dir            string // where the store and mount point go; "" a temporary directory
}

func clampDur(d, lo, hi time.Duration) time.Duration { return max(lo, min(hi, d)) }

func soakConfigFromEnv(t *testing.T) soakConfig {
	t.Helper()
	dur := func(name string, def time.Duration) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: not a duration", name, v)
		}
		return d
	}
	num := func(name string, def int) int {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: not a positive number", name, v)
		}
		return n
	}
	c := soakConfig{duration: dur("KVFS_SOAK_DURATION", time.Hour)}
	if c.duration < 30*time.Second {
		t.Fatalf("KVFS_SOAK_DURATION=%v: at least 30s", c.duration)
	}
	c.warmup = min(10*time.Minute, c.duration/6)
	c.settle = clampDur(c.duration/12, 30*time.Second, time.Minute)
	c.killEvery = dur("KVFS_SOAK_KILL_EVERY", c.duration/3)
	c.sample = clampDur(c.duration/240, time.Second, 5*time.Second)
	c.progress = clampDur(c.duration/12, 10*time.Second, time.Minute)
	c.scrape = 2 * time.Second
	c.blobGrace = clampDur(c.duration/12, 30*time.Second, 5*time.Minute)
	c.compactEvery = clampDur(c.duration/12, 10*time.Second, time.Minute)
	c.gcEvery = clampDur(c.duration/10, 15*time.Second, 5*time.Minute)
	c.capacity = os.Getenv("KVFS_SOAK_CAPACITY")
	if c.capacity == "" {
		c.capacity = "48M"
	}
	c.writers = num("KVFS_SOAK_WRITERS", 3)
	c.wholeWriters = num("KVFS_SOAK_WHOLE_WRITERS", 2)
	c.readers = num("KVFS_SOAK_READERS", 2)
	c.seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("KVFS_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KVFS_SOAK_SEED=%q: %v", v, err)
		}
		c.seed = n
	}
	c.dir = os.Getenv("KVFS_SOAK_DIR")
	return c
}

// soakEntry is an acknowledged file: a snapshot in the blocks layout (its
// manifest), a whole-layout snapshot, or a churn copy of one.
type soakEntry struct {
	kind  string // blocks, whole, churn
	owner int    // the writer that made it (blocks: may remove it)
	path  string // relative to the mount point
	names []string
	spec  soakSpec
	size  int64
	sha   string
	// blocks: the size and sha256 of /.kvfs/whole/<path>.
	viewSize int64
	viewSHA  string
	pinned   bool
	written  time.Duration // when it was acknowledged, into the run

	// Guarded by soakRun.mu.
	readers int  // readers verifying it
	busy    bool // being moved, removed, pinned: readers keep off
	idx     int  // in soakRun.entries; -1 once dropped
}

// soakSample is one reading of the daemon's resources.
type soakSample struct {
	at  time.Duration
	rss int64 // bytes
	fds int
}

// soakIncarnation is one daemon process, from its mount to its kill (or
// the end).
type soakIncarnation struct {
	pid        int
	start, end time.Duration
	samples    []soakSample
	// The last values scraped from its /metrics (they count since its
	// mount).
	evicted, compactions float64
	// Its most descriptors, and what they were.
	peakFDs   int
	peakKinds string
}

// soakRun is one soak.
type soakRun struct {
	t         *testing.T
	cfg       soakConfig
	m         *mount
	addr      string
	mountArgs []string
	start     time.Time
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	// gate is held shared by every operation on the mount and exclusively
	// by the killer while it unmounts and mounts again.
	gate sync.RWMutex
	// down is set from just before a kill until the new daemon serves;
	// epoch counts kills. An operation during which either changed may
	// have been cut by a kill.
	down  atomic.Bool
	epoch atomic.Int64

	mu      sync.Mutex // guards what follows
	entries []*soakEntry
	byPath  map[string]*soakEntry
	seq     int
	counts  map[string]int64
	convOut map[uint64]bool // shared conversations checked out (soakConv)
	incs    []*soakIncarnation
	clients []*soakClient

	// collecting counts collects in flight; collects counts those begun:
	// a blocks write whose block vanished under it is explained when
	// either moved during the write.
	collecting atomic.Int32
	collects   atomic.Int64

	inflight sync.Map // worker name -> soakInflight

	evlog  soakEvictLog
	failed atomic.Int32
}

type soakInflight struct {
	op    string
	since time.Time
}

func newSoakRun(t *testing.T, cfg soakConfig) *soakRun {
	dir := cfg.dir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &mount{store: filepath.Join(dir, "store"), mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	kvfs(t, "init", m.store)
	s := &soakRun{t: t, cfg: cfg, m: m, addr: freeAddr(t), byPath: map[string]*soakEntry{}, counts: map[string]int64{}, convOut: map[uint64]bool{}}
	s.evlog = soakEvictLog{path: filepath.Join(m.store, "kvfs.log"), evicted: map[string]bool{}}
	s.mountArgs = []string{"--metrics", s.addr, "--capacity", cfg.capacity, "--evict-interval", "1s",
		"--blob-grace", cfg.blobGrace.String(), "--compact-interval", cfg.compactEvery.String(), "--compact-threshold", "0.3"}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() {
		s.cancel()
		s.mu.Lock()
		cs := s.clients
		s.mu.Unlock()
		for _, c := range cs {
			c.cmd.Process.Kill()
		}
		if isMounted(m.mnt) {
			if exec.Command(kvfsBin, "unmount", m.mnt).Run() != nil {
				exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
			}
		}
	})
	return s
}

// since is the time into the run.
func (s *soakRun) since() time.Duration { return time.Since(s.start) }

func (s *soakRun) count(name string, n int64) {
	s.mu.Lock()
	s.counts[name] += n
	s.mu.Unlock()
}

// fail records a failure and ends the run early.
func (s *soakRun) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.failed.Add(1)
	fmt.Printf("soak %s: FAIL: %s\n", s.since().Round(time.Second), msg)
	s.t.Error(msg)
	s.cancel()
}

// retention is the policy of incarnation n: they alternate, so that both
// run under churn.
func retention(n int) string {
	if n%2 == 1 {
		return "cost-size"
	}
	return "lru"
}

// mountDaemon mounts the store with the soak's options and records the
// new daemon.
func (s *soakRun) mountDaemon() error {
	s.mu.Lock()
	n := len(s.incs)
	s.mu.Unlock()
	args := append([]string{"mount"}, s.mountArgs...)
	args = append(args, "--retention", retention(n))
	args = append(args, strings.Fields(os.Getenv("KVFS_TEST_MOUNT_ARGS"))...)
	args = append(args, s.m.store, s.m.mnt)
	if out, err := exec.Command(kvfsBin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("kvfs mount: %v\n%s", err, out)
	}
	if !isMounted(s.m.mnt) {
		return fmt.Errorf("kvfs mount returned but %s is not in mountinfo", s.m.mnt)
	}
	out, err := exec.Command("pgrep", "-f", "kvfs mount --foreground .*"+s.m.store).Output()
	if err != nil {
		return fmt.Errorf("find the daemon: %v", err)
	}
	var pid int
	fmt.Sscan(string(out), &pid)
	s.mu.Lock()
	s.incs = append(s.incs, &soakIncarnation{pid: pid, start: s.since()})
	s.mu.Unlock()
	return nil
}

func (s *soakRun) current() *soakIncarnation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incs[len(s.incs)-1]
}

// processGone reports whether pid has exited (gone, or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// kill kills the daemon with SIGKILL, while the workers run, then holds
// the gate while it unmounts the dead mount and mounts the store again.
func (s *soakRun) kill() error {
	inc := s.current()
	s.down.Store(true)
	s.epoch.Add(1)
	if err := syscall.Kill(inc.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill daemon %d: %v", inc.pid, err)
	}
	wait := func(d time.Duration) bool {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if processGone(inc.pid) {
				return true
			}
		}
		return false
	}
	if !wait(5 * time.Second) {
		// Wedged on its own mount (wedged_test.go): abort the connection.
		s.count("kill-aborted", 1)
		if err := abortFUSE(s.m.mnt); err != nil {
			return fmt.Errorf("abort the FUSE connection of daemon %d: %v", inc.pid, err)
		}
		if !wait(10 * time.Second) {
			return fmt.Errorf("killed daemon %d did not exit", inc.pid)
		}
	}
	s.gate.Lock()
	defer s.gate.Unlock()
	s.mu.Lock()
	inc.end = s.since()
	s.mu.Unlock()
	exec.Command(kvfsBin, "unmount", "--lazy", s.m.mnt).Run()
	if err := s.mountDaemon(); err != nil {
		return err
	}
	s.count("kill", 1)
	s.down.Store(false)
	return nil
}

// onMount runs f with the mount up and reports whether a kill may have
// cut it.
func (s *soakRun) onMount(f func()) (killed bool) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	e := s.epoch.Load()
	f()
	return s.down.Load() || s.epoch.Load() != e
}

// pause sleeps up to d, or until the run ends; it reports whether the run
// goes on.
func (s *soakRun) pause(r *rand.Rand, d time.Duration) bool {
	select {
	case <-s.ctx.Done():
		return false
	case <-time.After(time.Duration(r.Int64N(int64(d) + 1))):
		return true
	}
}

// The model of acknowledged files.

func (s *soakRun) add(e *soakEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.idx = len(s.entries)
	e.names = append(e.names, e.path)
	e.written = s.since()
	s.entries = append(s.entries, e)
	s.byPath[e.path] = e
}

// drop removes e from the model (idempotent).
func (s *soakRun) drop(e *soakEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(e)
}

func (s *soakRun) dropLocked(e *soakEntry) {
	if e.idx < 0 {
		return
	}
	last := s.entries[len(s.entries)-1]
	s.entries[e.idx] = last
	last.idx = e.idx
	s.entries = s.entries[:len(s.entries)-1]
	e.idx = -1
	if s.byPath[e.path] == e {
		delete(s.byPath, e.path)
	}
}

// acquire picks an entry that ok accepts, for reading (readers keep
// movers and removers off it), or nil.
func (s *soakRun) acquire(r *rand.Rand, ok func(*soakEntry) bool) *soakEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range 16 {
		if len(s.entries) == 0 {
			return nil
		}
		e := s.entries[r.IntN(len(s.entries))]
		if !e.busy && ok(e) {
			e.readers++
			return e
		}
	}
	return nil
}

func (s *soakRun) release(e *soakEntry) {
	s.mu.Lock()
	e.readers--
	s.mu.Unlock()
}

// take picks an entry that ok accepts and no one reads, to move, remove
// or pin it, or nil; settle gives it back.
func (s *soakRun) take(r *rand.Rand, ok func(*soakEntry) bool) *soakEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range 16 {
		if len(s.entries) == 0 {
			return nil
		}
		e := s.entries[r.IntN(len(s.entries))]
		if !e.busy && e.readers == 0 && ok(e) {
			e.busy = true
			return e
		}
	}
	return nil
}

func (s *soakRun) settle(e *soakEntry) {
	s.mu.Lock()
	e.busy = false
	s.mu.Unlock()
}

// moved records that e is now at path.
func (s *soakRun) moved(e *soakEntry, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byPath[e.path] == e {
		delete(s.byPath, e.path)
	}
	e.path = path
	e.names = append(e.names, path)
	if e.idx >= 0 {
		s.byPath[path] = e
	}
}

func (s *soakRun) nextSeq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// soakEvictLog follows the daemon's log (it appends across restarts) for
// its "evicted" lines.
type soakEvictLog struct {
	mu      sync.Mutex
	path    string
	off     int64
	partial []byte
	evicted map[string]bool // paths, relative to the mount point
	files   int             // evicted lines
	blocks  int             // of which engine blocks
	errors  int             // level=ERROR lines
}

var soakEvictedRe = regexp.MustCompile(`msg=evicted path=("(?:[^"\\]|\\.)*"|\S+)`)

// refresh reads what the log gained and returns the paths newly evicted.
func (l *soakEvictLog) refresh() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Open(l.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, l.off, 1<<40))
	l.off += int64(len(b))
	b = append(l.partial, b...)
	end := bytes.LastIndexByte(b, '\n') + 1
	l.partial = slices.Clone(b[end:])
	var out []string
	for line := range strings.SplitSeq(string(b[:end]), "\n") {
		if strings.Contains(line, "level=ERROR") {
			l.errors++
		}
		g := soakEvictedRe.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		p := g[1]
		if uq, err := strconv.Unquote(p); err == nil {
			p = uq
		}
		p = strings.TrimPrefix(p, "/")
		l.evicted[p] = true
		l.files++
		if filepath.Base(filepath.Dir(p)) == "blocks" {
			l.blocks++
		}
		out = append(out, p)
	}
	return out
}

// wasEvicted reports whether the daemon logged the eviction of any of
// names, giving the log line a few seconds to follow the eviction's commit.
func (l *soakEvictLog) wasEvicted(names []string) bool {
	for try := 0; try < 6; try++ {
		l.refresh()
		l.mu.Lock()
		for _, n := range names {
			if l.evicted[n] {
				l.mu.Unlock()
				return true
			}
		}
		l.mu.Unlock()
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// pruneEvicted drops from the model the entries the daemon evicted; a
// pinned one is a failure.
func (s *soakRun) pruneEvicted() {
	for _, p := range s.evlog.refresh() {
		s.mu.Lock()
		e := s.byPath[p]
		pinned := false
		if e != nil && !e.busy {
			s.dropLocked(e)
			s.counts["evicted-acked"]++
			pinned = e.pinned
		}
		s.mu.Unlock()
		if pinned {
			s.fail("pinned file %s (acknowledged at %s) was evicted", p, e.written.Round(time.Second))
		}
	}
}

// gone handles an acknowledged entry found missing: evicted (dropped), or
// a failure.
func (s *soakRun) gone(e *soakEntry, what string) {
	s.mu.Lock()
	names, dropped := slices.Clone(e.names), e.idx < 0
	s.mu.Unlock()
	if dropped { // found evicted meanwhile (pruneEvicted)
		return
	}
	if s.evlog.wasEvicted(names) {
		s.drop(e)
		s.count("evicted-acked", 1)
		if e.pinned {
			s.fail("pinned file %s was evicted", e.path)
		}
		return
	}
	s.fail("acknowledged %s file %s (acknowledged at %s, names %v) is gone: %s; the daemon did not evict it and the soak did not remove it",
		e.kind, e.path, e.written.Round(time.Second), names, what)
	s.drop(e) // reported once
}

// soakClient is a worker process (soak_clients_test.go).
type soakClient struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	dec    *json.Decoder
	stderr *bytes.Buffer
}

func (s *soakRun) newClient(name string) *soakClient {
	cmd := client("soakworker")
	in, err := cmd.StdinPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	c := &soakClient{name: name, cmd: cmd, in: in, dec: json.NewDecoder(bufio.NewReader(out)), stderr: &bytes.Buffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// call sends req and waits for the answer; a worker that died is a
// failure of the run (reported by the caller).
func (s *soakRun) call(c *soakClient, req soakReq) (soakResp, error) {
	s.inflight.Store(c.name, soakInflight{op: req.Op + " " + req.Path, since: time.Now()})
	defer s.inflight.Delete(c.name)
	b, _ := json.Marshal(req)
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		return soakResp{}, fmt.Errorf("worker %s: %v\n%s", c.name, err, c.stderr)
	}
	var resp soakResp
	if err := c.dec.Decode(&resp); err != nil {
		return soakResp{}, fmt.Errorf("worker %s died: %v\n%s", c.name, err, c.stderr)
	}
	return resp, nil
}

func (c *soakClient) close() {
	c.in.Close()
	c.cmd.Wait()
}

// run runs the soak.
func (s *soakRun) run() {
	cfg := s.cfg
	fmt.Printf("soak: %v, kill every %v, capacity %s, blob grace %v, compaction every %v, %d blocks writers, %d whole writers, %d readers, seed %d; store %s\n",
		cfg.duration, cfg.killEvery, cfg.capacity, cfg.blobGrace, cfg.compactEvery, cfg.writers, cfg.wholeWriters, cfg.readers, cfg.seed, s.m.store)
	s.start = time.Now()
	if err := s.mountDaemon(); err != nil {
		s.t.Fatal(err)
	}
	for _, d := range []string{"fp/ns0", "fp/ns1", "churn/a", "churn/b"} {
		if err := os.MkdirAll(s.m.path(d), 0o755); err != nil {
			s.t.Fatal(err)
		}
	}
	for i := range cfg.writers {
		s.spawn(fmt.Sprintf("blocks%d", i), true, func(r *rand.Rand, c *soakClient) { s.blocksWriter(i, r, c) })
	}
	for i := range cfg.wholeWriters {
		if err := os.MkdirAll(s.m.path(fmt.Sprintf("whole/w%d", i)), 0o755); err != nil {
			s.t.Fatal(err)
		}
		s.spawn(fmt.Sprintf("whole%d", i), true, func(r *rand.Rand, c *soakClient) { s.wholeWriter(i, r, c) })
	}
	for i := range cfg.readers {
		s.spawn(fmt.Sprintf("reader%d", i), true, func(r *rand.Rand, c *soakClient) { s.reader(r, c) })
	}
	s.spawn("churn", false, func(r *rand.Rand, _ *soakClient) { s.churn(r) })
	s.spawn("scraper", false, func(r *rand.Rand, _ *soakClient) { s.scraper(r) })
	s.spawn("gc", false, func(r *rand.Rand, _ *soakClient) { s.gcLoop(r) })

	end := s.start.Add(cfg.duration)
	nextKill := s.start.Add(cfg.killEvery)
	nextProgress := s.start.Add(cfg.progress)
	tick := time.NewTicker(cfg.sample)
	defer tick.Stop()
	kr := rand.New(rand.NewPCG(cfg.seed, 99))
loop:
	for {
		select {
		case <-s.ctx.Done():
			break loop
		case now := <-tick.C:
			if now.After(end) {
				break loop
			}
			s.sampleResources()
			s.pruneEvicted()
			s.watchdog()
			if cfg.killEvery > 0 && now.After(nextKill) {
				if err := s.kill(); err != nil {
					s.fail("kill and remount: %v\n%s", err, s.logTail())
					break loop
				}
				// ±20%, so that kills meet every phase of the workers.
				j := time.Duration(kr.Int64N(int64(cfg.killEvery)*2/5+1)) - cfg.killEvery/5
				nextKill = time.Now().Add(cfg.killEvery + j)
			}
			if now.After(nextProgress) {
				s.progressLine()
				nextProgress = nextProgress.Add(cfg.progress)
			}
		}
	}
	s.cancel()
	s.wg.Wait()
	s.finish()
}

// spawn runs a worker until the run ends, with a worker process of its
// own if withClient.
func (s *soakRun) spawn(name string, withClient bool, f func(r *rand.Rand, c *soakClient)) {
	var c *soakClient
	if withClient {
		c = s.newClient(name)
	}
	h := uint64(0)
	for _, ch := range name {
		h = h*31 + uint64(ch)
	}
	r := rand.New(rand.NewPCG(s.cfg.seed, h))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if c != nil {
			defer c.close()
		}
		f(r, c)
	}()
}

// watchdog fails the run when an operation has been in flight for 3
// minutes: a hung daemon.
func (s *soakRun) watchdog() {
	s.inflight.Range(func(k, v any) bool {
		in := v.(soakInflight)
		if time.Since(in.since) > 3*time.Minute {
			s.fail("%s: %s in flight for %v\n%s", k, in.op, time.Since(in.since).Round(time.Second), s.logTail())
			return false
		}
		return true
	})
}

// soakPool is the number of shared conversations of a pool.
const soakPool = 6

// soakConv picks a conversation for a writer: with fresh, one new to the
// store; else one of pool's shared conversations (several writers write
// its snapshots over time, so one process finds blocks another wrote),
// checked out until conv is returned with soakConvDone, so that no two
// processes write the same block at once (the engine's tmp names would
// collide: the protocol has no cross-process lock), or a fresh one if all
// are out.
func (s *soakRun) soakConv(r *rand.Rand, pool string, fresh bool) uint64 {
	h := uint64(14695981039346656037)
	for _, ch := range pool {
		h = (h ^ uint64(ch)) * 1099511628211
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for try := 0; try < 2*soakPool && !fresh; try++ {
		c := h + uint64(r.IntN(soakPool))
		if !s.convOut[c] {
			s.convOut[c] = true
			return c
		}
	}
	return r.Uint64()
}

func (s *soakRun) soakConvDone(c uint64) {
	s.mu.Lock()
	delete(s.convOut, c)
	s.mu.Unlock()
}

// blocksWriter is engine writer i: snapshots of growing conversations in
// the blocks layout into namespace fp/ns(i%2), through its process (the
// shared conversations are shared by both namespaces: a lookup finds a
// blob the other wrote); the engine's remove of an older snapshot now and
// then, and a collect of fp every few writes.
func (s *soakRun) blocksWriter(i int, r *rand.Rand, c *soakClient) {
	ns := fmt.Sprintf("fp/ns%d", i%2)
	var conv uint64
	T := 1 << 30
	for n := 0; ; n++ {
		if T >= 2048 || r.IntN(4) == 0 {
			s.soakConvDone(conv)
			conv, T = s.soakConv(r, "fp", r.IntN(2) == 0), 128+r.IntN(384)
		} else {
			T = min(2048, T+64+r.IntN(320))
		}
		spec := soakSpec{Conv: conv, T: T}
		rel := fmt.Sprintf("%s/w%d-%06d-t%d.mlxkv", ns, i, s.nextSeq(), T)
		var resp soakResp
		var err error
		c0, during := s.collects.Load(), s.collecting.Load() > 0
		killed := s.onMount(func() { resp, err = s.call(c, soakReq{Op: "write-blocks", Path: s.m.path(rel), Spec: spec}) })
		collected := during || s.collecting.Load() > 0 || s.collects.Load() != c0
		if err != nil {
			s.fail("%v", err)
			return
		}
		e := &soakEntry{kind: "blocks", owner: i, path: rel, spec: spec, size: resp.Size, sha: resp.SHA, viewSize: resp.ViewSize, viewSHA: resp.ViewSHA}
		switch {
		case resp.Class == "":
			s.add(e)
			s.count("blocks-write", 1)
			s.count("blocks-written-bytes", resp.Written)
			s.count("blocks-reused-bytes", resp.Reused)
		case killed:
			s.count("write-cut-by-kill", 1)
			s.adoptAfterKill(c, r, e)
		case resp.Class == "enoent" && collected:
			// A collect in another process deleted one of this
			// snapshot's blocks while it was being written (its .tmp):
			// the engine's own race; the write failed and is not
			// acknowledged.
			s.count("write-cut-by-collect", 1)
		case s.tmpEvicted(resp):
		case resp.Class == "mismatch":
			s.fail("blocks write %s: %s", rel, resp.Err)
		default:
			s.fail("blocks write %s: %s (%s)", rel, resp.Err, resp.Class)
		}
		if r.IntN(3) == 0 {
			s.removeOwn(i, r, c)
		}
		if n%6 == 5 {
			s.collect(c)
		}
		if !s.pause(r, 200*time.Millisecond) {
			return
		}
	}
}

// tmpEvicted reports whether a write failed because the daemon evicted
// its tmp file between the fsync and close and the rename (the daemon
// logged it): no acknowledged file is lost, so this is not one of the
// soak's failures, but the engine's write failed for no fault of its own.
// It is counted, shown in the summary and warned of (the first few).
func (s *soakRun) tmpEvicted(resp soakResp) bool {
	if resp.Class != "enoent" || !strings.HasSuffix(resp.Path, ".tmp") {
		return false
	}
	rel, err := filepath.Rel(s.m.mnt, resp.Path)
	if err != nil || !s.evlog.wasEvicted([]string{rel}) {
		return false
	}
	s.mu.Lock()
	s.counts["write-tmp-evicted"]++
	n := s.counts["write-tmp-evicted"]
	s.mu.Unlock()
	if n <= 3 {
		fmt.Printf("soak %s: WARNING: the daemon evicted %s between its writer's fsync and close and its rename; the write failed: %s\n", s.since().Round(time.Second), rel, resp.Err)
	}
	return true
}

// adoptAfterKill settles a write that a kill cut: once the daemon is
// back, a file at e's path was renamed into place before the kill, so it
// must be whole (and a manifest's blocks all there): it is verified and
// becomes acknowledged.
func (s *soakRun) adoptAfterKill(c *soakClient, r *rand.Rand, e *soakEntry) {
	if e.sha == "" { // the worker did not get to answer with it
		return
	}
	var st error
	s.onMount(func() { _, st = os.Stat(s.m.path(e.path)) })
	if st != nil {
		return
	}
	s.add(e)
	s.count("adopted-after-kill", 1)
	s.verify(c, r, e, false, false)
}

// removeOwn is the engine's remove of one of writer i's snapshots; the
// next collect deletes the blocks only it listed.
func (s *soakRun) removeOwn(i int, r *rand.Rand, c *soakClient) {
	e := s.take(r, func(e *soakEntry) bool { return e.kind == "blocks" && e.owner == i })
	if e == nil {
		return
	}
	s.drop(e)
	var resp soakResp
	var err error
	killed := s.onMount(func() { resp, err = s.call(c, soakReq{Op: "remove", Path: s.m.path(e.path)}) })
	if err != nil {
		s.fail("%v", err)
		return
	}
	switch {
	case resp.Class == "" || killed:
		s.count("remove", 1)
	case resp.Class == "enoent":
		s.count("remove-evicted", 1) // evicted first
	default:
		s.fail("remove %s: %s", e.path, resp.Err)
	}
}

// collect runs the engine's collect of fp/ (FORMAT.md §4.6) in c's process.
func (s *soakRun) collect(c *soakClient) {
	var resp soakResp
	var err error
	s.collecting.Add(1)
	s.collects.Add(1)
	killed := s.onMount(func() { resp, err = s.call(c, soakReq{Op: "collect", Path: s.m.path("fp")}) })
	s.collecting.Add(-1)
	if err != nil {
		s.fail("%v", err)
		return
	}
	switch {
	case resp.Class == "":
		s.count("collect", 1)
		s.count("collect-deleted", int64(resp.Deleted))
	case resp.Class == "mismatch":
		s.fail("collect: %s", resp.Err)
	case killed:
	case resp.Class == "enoent":
		// A manifest vanished between the listing and its read
		// (evicted, or removed by another writer): the engine's collect
		// stops at the error.
		s.count("collect-aborted", 1)
	default:
		s.fail("collect: %s (%s)", resp.Err, resp.Class)
	}
}

// wholeWriter is whole-layout writer i: snapshots of random length, half
// of shared conversations, into whole/w<i>; a quarter get pinned while
// fewer than 6 are, and pinned ones are unpinned again.
func (s *soakRun) wholeWriter(i int, r *rand.Rand, c *soakClient) {
	for {
		// Whole-layout files of the same conversation share chunks in the
		// store, and each has a name of its own: they need no checkout.
		spec := soakSpec{Conv: s.soakConv(r, "whole", r.IntN(2) == 0), T: 64 + r.IntN(960)}
		s.soakConvDone(spec.Conv)
		rel := fmt.Sprintf("whole/w%d/%06d-t%d.mlxkv", i, s.nextSeq(), spec.T)
		var resp soakResp
		var err error
		killed := s.onMount(func() { resp, err = s.call(c, soakReq{Op: "write-whole", Path: s.m.path(rel), Spec: spec}) })
		if err != nil {
			s.fail("%v", err)
			return
		}
		e := &soakEntry{kind: "whole", owner: i, path: rel, spec: spec, size: resp.Size, sha: resp.SHA}
		switch {
		case resp.Class == "":
			s.add(e)
			s.count("whole-write", 1)
			if r.IntN(4) == 0 {
				s.pin(e)
			}
		case killed:
			s.count("write-cut-by-kill", 1)
			s.adoptAfterKill(c, r, e)
		case s.tmpEvicted(resp):
		default:
			s.fail("whole write %s: %s (%s)", rel, resp.Err, resp.Class)
		}
		if r.IntN(10) == 0 {
			s.unpinOne(r)
		}
		if !s.pause(r, 200*time.Millisecond) {
			return
		}
	}
}

func (s *soakRun) pinnedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.entries {
		if e.pinned {
			n++
		}
	}
	return n
}

// pin pins e (kvfs pin, which sets user.kvfs.pin through the mount) if
// fewer than 6 files are pinned; it counts as pinned once the command
// returned.
func (s *soakRun) pin(e *soakEntry) {
	if s.pinnedCount() >= 6 {
		return
	}
	s.mu.Lock()
	if e.busy || e.readers > 0 || e.idx < 0 {
		s.mu.Unlock()
		return
	}
	e.busy = true
	s.mu.Unlock()
	defer s.settle(e)
	var out []byte
	var err error
	killed := s.onMount(func() { out, err = exec.Command(kvfsBin, "pin", s.m.path(e.path)).CombinedOutput() })
	switch {
	case err == nil:
		s.mu.Lock()
		e.pinned = true
		s.mu.Unlock()
		s.count("pin", 1)
	case killed:
	case bytes.Contains(out, []byte("no such file")):
		s.gone(e, strings.TrimSpace(string(out)))
	default:
		s.fail("kvfs pin %s: %v\n%s", e.path, err, out)
	}
}

// unpinOne unpins a pinned file (kvfs unpin); it counts as unpinned from
// before the command.
func (s *soakRun) unpinOne(r *rand.Rand) {
	e := s.take(r, func(e *soakEntry) bool { return e.pinned })
	if e == nil {
		return
	}
	defer s.settle(e)
	s.mu.Lock()
	e.pinned = false
	s.mu.Unlock()
	var out []byte
	var err error
	killed := s.onMount(func() { out, err = exec.Command(kvfsBin, "unpin", s.m.path(e.path)).CombinedOutput() })
	switch {
	case err == nil:
		s.count("unpin", 1)
	case killed:
	case bytes.Contains(out, []byte("no such file")):
		s.gone(e, strings.TrimSpace(string(out)))
	default:
		s.fail("kvfs unpin %s: %v\n%s", e.path, err, out)
	}
}

// churn copies, moves and removes files with cp, mv and rm.
func (s *soakRun) churn(r *rand.Rand) {
	for {
		switch k := r.IntN(20); {
		case k < 8:
			s.churnCp(r)
		case k < 15:
			s.churnMv(r)
		default:
			s.churnRm(r)
		}
		if !s.pause(r, 150*time.Millisecond) {
			return
		}
	}
}

func (s *soakRun) sh(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// churnCp copies a whole-layout file to a new name under churn/: the
// copy is acknowledged when cp returns (kvfs commits at its close).
func (s *soakRun) churnCp(r *rand.Rand) {
	src := s.acquire(r, func(e *soakEntry) bool { return e.kind != "blocks" })
	if src == nil {
		return
	}
	dst := fmt.Sprintf("churn/%c/c%06d.mlxkv", 'a'+r.IntN(2), s.nextSeq())
	var out string
	var err error
	killed := s.onMount(func() { out, err = s.sh("cp", s.m.path(src.path), s.m.path(dst)) })
	s.release(src)
	switch {
	case err == nil:
		s.add(&soakEntry{kind: "churn", path: dst, spec: src.spec, size: src.size, sha: src.sha})
		s.count("cp", 1)
	case killed:
		// Not acknowledged: whatever cp left goes.
		s.onMount(func() { os.Remove(s.m.path(dst)) })
	case strings.Contains(out, "No such file"):
		// Evicted between the pick and cp's open.
		s.gone(src, strings.TrimSpace(out))
	default:
		s.fail("cp %s %s: %v\n%s", src.path, dst, err, out)
	}
}

// churnMv renames a file: a whole-layout file or copy to a new name in
// the other churn directory, a manifest to a new name in its namespace.
func (s *soakRun) churnMv(r *rand.Rand) {
	e := s.take(r, func(*soakEntry) bool { return true })
	if e == nil {
		return
	}
	defer s.settle(e)
	dst := fmt.Sprintf("churn/%c/m%06d.mlxkv", 'a'+r.IntN(2), s.nextSeq())
	if e.kind == "blocks" {
		dst = fmt.Sprintf("%s/m%06d-t%d.mlxkv", filepath.Dir(e.path), s.nextSeq(), e.spec.T)
	}
	var out string
	var err error
	killed := s.onMount(func() { out, err = s.sh("mv", s.m.path(e.path), s.m.path(dst)) })
	switch {
	case err == nil:
		s.moved(e, dst)
		s.count("mv", 1)
	case killed:
		var errSrc, errDst error
		s.onMount(func() {
			_, errSrc = os.Stat(s.m.path(e.path))
			_, errDst = os.Stat(s.m.path(dst))
		})
		switch {
		case errDst == nil && errSrc != nil:
			s.moved(e, dst)
		case errSrc == nil:
		default:
			s.mu.Lock()
			e.names = append(e.names, dst)
			s.mu.Unlock()
			s.gone(e, fmt.Sprintf("mv cut by a kill: neither %s (%v) nor %s (%v)", e.path, errSrc, dst, errDst))
		}
	case strings.Contains(out, "No such file"):
		s.gone(e, strings.TrimSpace(out))
	default:
		s.fail("mv %s %s: %v\n%s", e.path, dst, err, out)
	}
}

// churnRm removes a whole-layout file or a copy.
func (s *soakRun) churnRm(r *rand.Rand) {
	e := s.take(r, func(e *soakEntry) bool { return e.kind != "blocks" })
	if e == nil {
		return
	}
	s.drop(e)
	var out string
	var err error
	killed := s.onMount(func() { out, err = s.sh("rm", s.m.path(e.path)) })
	switch {
	case err == nil || killed:
		s.count("rm", 1)
	case strings.Contains(out, "No such file"):
		s.count("rm-evicted", 1)
	default:
		s.fail("rm %s: %v\n%s", e.path, err, out)
	}
}

// reader verifies acknowledged files, alternating pread and mmap, and a
// blocks snapshot now and then through /.kvfs/whole.
func (s *soakRun) reader(r *rand.Rand, c *soakClient) {
	for n := 0; ; n++ {
		e := s.acquire(r, func(*soakEntry) bool { return true })
		if e != nil {
			s.verify(c, r, e, n%2 == 1, e.kind == "blocks" && r.IntN(4) == 0)
			s.release(e)
		}
		if !s.pause(r, 50*time.Millisecond) {
			return
		}
	}
}

// verify checks e through c, by pread or mmap, or its whole view, and
// judges the answer.
func (s *soakRun) verify(c *soakClient, r *rand.Rand, e *soakEntry, useMmap, view bool) {
	req := soakReq{Op: "verify", Path: s.m.path(e.path), Spec: e.spec, Size: e.size, SHA: e.sha, Want: "whole", Mmap: useMmap, Seed: r.Uint64()}
	kind := "verify-read"
	if useMmap {
		kind = "verify-mmap"
	}
	switch {
	case view:
		req.Path, req.Size, req.SHA = s.m.path(filepath.Join(".kvfs/whole", e.path)), e.viewSize, e.viewSHA
		kind = "verify-view"
	case e.kind == "blocks":
		req.Want = "manifest"
	}
	var resp soakResp
	var err error
	killed := s.onMount(func() { resp, err = s.call(c, req) })
	if err != nil {
		s.fail("%v", err)
		return
	}
	switch {
	case resp.Class == "":
		s.count(kind, 1)
		s.count("verified-bytes", resp.Bytes)
	case resp.Class == "mismatch":
		s.fail("%s: %s", kind, resp.Err)
		s.drop(e) // reported once
	case killed:
	case resp.Class == "enoent" && (resp.Path == req.Path || resp.Path == ""):
		s.gone(e, resp.Err)
	case resp.Class == "blockmissing":
		s.blockMissing(e, resp)
	default:
		s.fail("%s %s: %s (%s)", kind, e.path, resp.Err, resp.Class)
	}
}

// blockMissing: a manifest that verified, held open, lists a block whose
// name does not resolve: the snapshot is no longer restorable.
func (s *soakRun) blockMissing(e *soakEntry, resp soakResp) {
	rel, _ := filepath.Rel(s.m.mnt, resp.Path)
	cause := "the daemon did not log its eviction"
	if s.evlog.wasEvicted([]string{rel}) {
		cause = "the daemon EVICTED it (logged 'evicted path=/" + rel + "'): capacity eviction removed a block that a writer saw exist (and skipped) before its manifest committed: the known eviction bug"
	}
	s.fail("acknowledged blocks snapshot %s (acknowledged at %s) lost a block: %s; %s", e.path, e.written.Round(time.Second), resp.Err, cause)
	s.drop(e) // reported once
}

// scraper scrapes /metrics every few seconds, and reads /.kvfs/stats.
func (s *soakRun) scraper(r *rand.Rand) {
	for n := 0; ; n++ {
		if !s.pause(r, 2*s.cfg.scrape) {
			return
		}
		var inc *soakIncarnation
		var err error
		var ev, comp float64
		killed := s.onMount(func() {
			if s.down.Load() {
				return
			}
			inc = s.current() // the daemon scraped: taken with the gate held
			mfs, _, e := fetchMetrics(s.addr)
			if err = e; err != nil {
				return
			}
			ev, comp = max(0, gauge(mfs, "kvfs_evicted_files")), max(0, gauge(mfs, "kvfs_compactions"))
			if n%5 == 0 {
				var b []byte
				if b, err = os.ReadFile(s.m.path(".kvfs/stats")); err == nil && !json.Valid(b) {
					err = fmt.Errorf("/.kvfs/stats is not JSON: %q", b)
				}
			}
		})
		switch {
		case err == nil && !killed:
			s.mu.Lock()
			inc.evicted, inc.compactions = ev, comp
			s.mu.Unlock()
			s.count("scrape", 1)
		case killed:
		default:
			s.fail("scrape: %v", err)
		}
	}
}

// gcLoop runs kvfs gc through the daemon's socket now and then, besides
// the daemon's background compaction.
func (s *soakRun) gcLoop(r *rand.Rand) {
	for {
		if !s.pause(r, 2*s.cfg.gcEvery) {
			return
		}
		var out []byte
		var err error
		killed := s.onMount(func() {
			if !s.down.Load() {
				out, err = exec.Command(kvfsBin, "gc", "--threshold", "0.3", s.m.store).CombinedOutput()
			}
		})
		switch {
		case err == nil && !killed:
			s.count("gc", 1)
		case killed:
		default:
			s.fail("kvfs gc: %v\n%s", err, out)
		}
	}
}

// procRSS and procFDs read a process's resident set and descriptor count.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// procFDs counts a process's descriptors and says what they are: pack
// files, spool files, the journal, pipes, sockets, ...
func procFDs(pid int) (int, string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	kinds := map[string]int{}
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		k := "other"
		switch {
		case strings.Contains(l, "/packs/"):
			k = "packs"
		case strings.Contains(l, "/spool/"):
			k = "spool"
		case strings.Contains(l, "/journal/"):
			k = "journal"
		case strings.HasPrefix(l, "pipe:"):
			k = "pipes"
		case strings.HasPrefix(l, "socket:"):
			k = "sockets"
		case strings.HasPrefix(l, "anon_inode:"):
			k = "anon"
		case l == "/dev/fuse":
			k = "fuse"
		}
		kinds[k]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(ks)
	return len(ents), strings.Join(ks, ", "), err
}

// sampleResources reads the daemon's RSS and descriptors.
func (s *soakRun) sampleResources() {
	if s.down.Load() {
		return
	}
	inc := s.current()
	rss, err1 := procRSS(inc.pid)
	fds, kinds, err2 := procFDs(inc.pid)
	if err1 != nil || err2 != nil {
		if !s.down.Load() && inc == s.current() {
			s.fail("daemon %d: %v %v (did it die?)\n%s", inc.pid, err1, err2, s.logTail())
		}
		return
	}
	s.mu.Lock()
	if fds > inc.peakFDs {
		inc.peakFDs, inc.peakKinds = fds, kinds
	}
	inc.samples = append(inc.samples, soakSample{at: s.since(), rss: rss, fds: fds})
	s.mu.Unlock()
}

// soakGrowth judges an incarnation's resources. Samples are smoothed by a
// moving median over the settling time (a minute; what is in flight,
// spools in memory and go-fuse's splice pipes, comes and goes within
// seconds; a leak moves the median). The baseline is the median of the
// settling time before the baseline point, the end of the daemon's
// warm-up: its first 10 minutes (1/6 of a shorter run), counted from its
// mount, in which its caches fill (the first hour's run saw each daemon
// rise from 120-150 MiB at its first minute to 170-195 MiB by its
// seventh, and stay there). The incarnation fails if a later median
// exceeds the baseline by more than 20%. A daemon killed before its
// baseline point is not judged. level is the median of every sample after
// the baseline point, to compare incarnations (finish).
func (s *soakRun) soakGrowth(inc *soakIncarnation) (g soakGrowthResult) {
	S := s.cfg.settle
	bp := inc.start + s.cfg.warmup
	median := func(to time.Duration, v func(soakSample) int64) int64 {
		var xs []int64
		for _, sm := range inc.samples {
			if sm.at > to-S && sm.at <= to {
				xs = append(xs, v(sm))
			}
		}
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	rss := func(sm soakSample) int64 { return sm.rss }
	fds := func(sm soakSample) int64 { return int64(sm.fds) }
	g.rssBase, g.fdBase = median(bp, rss), median(bp, fds)
	var after []int64
	for _, sm := range inc.samples {
		g.rssPeak, g.fdPeak = max(g.rssPeak, sm.rss), max(g.fdPeak, int64(sm.fds))
		if sm.at > bp {
			g.judged = true
			g.rssMed, g.fdMed = max(g.rssMed, median(sm.at, rss)), max(g.fdMed, median(sm.at, fds))
			after = append(after, sm.rss)
		}
	}
	g.judged = g.judged && g.rssBase > 0
	if len(after) > 0 {
		slices.Sort(after)
		g.rssLevel = after[len(after)/2]
	}
	return g
}

// soakGrowthResult is what soakGrowth found: baselines, the largest
// later medians, the raw peaks.
type soakGrowthResult struct {
	rssBase, rssMed, rssPeak int64
	fdBase, fdMed, fdPeak    int64
	rssLevel                 int64 // the median after the baseline point
	judged                   bool
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// countsLine is the operation counts, sorted.
func (s *soakRun) countsLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []string
	for k := range s.counts {
		if k != "verified-bytes" && k != "blocks-written-bytes" && k != "blocks-reused-bytes" {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, " %s=%d", k, s.counts[k])
	}
	return strings.TrimSpace(b.String())
}

func (s *soakRun) progressLine() {
	var last soakSample
	inc := s.current()
	s.mu.Lock()
	if len(inc.samples) > 0 {
		last = inc.samples[len(inc.samples)-1]
	}
	entries, kills, verified := len(s.entries), s.counts["kill"], s.counts["verified-bytes"]
	s.mu.Unlock()
	s.evlog.mu.Lock()
	evicted := s.evlog.files
	s.evlog.mu.Unlock()
	fmt.Printf("soak %s: %s | kills %d, evicted %d, files %d, verified %s | daemon %d: rss %s, fds %d\n",
		s.since().Round(time.Second), s.countsLine(), kills, evicted, entries, mib(verified), inc.pid, mib(last.rss), last.fds)
}

// logTail is the end of the daemon's log.
func (s *soakRun) logTail() string {
	b, _ := os.ReadFile(s.evlog.path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return "daemon log (last lines):\n" + strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// finish verifies every acknowledged file once more, unmounts, runs kvfs
// fsck --verify, judges resources and prints the summary.
func (s *soakRun) finish() {
	t := s.t
	elapsed := s.since()
	s.mu.Lock()
	s.incs[len(s.incs)-1].end = elapsed
	s.mu.Unlock()
	if isMounted(s.m.mnt) && !s.down.Load() {
		s.ctx, s.cancel = context.WithCancel(context.Background()) // s.fail cancels it
		s.pruneEvicted()
		c := s.newClient("final")
		r := rand.New(rand.NewPCG(s.cfg.seed, 1))
		s.mu.Lock()
		all := slices.Clone(s.entries)
		s.mu.Unlock()
		for _, e := range all {
			s.mu.Lock()
			live := e.idx >= 0
			e.readers++
			s.mu.Unlock()
			if live {
				s.verify(c, r, e, false, false)
			}
			s.release(e)
		}
		c.close()
		s.count("final-verified", int64(len(all)))
		if mfs, _, err := fetchMetrics(s.addr); err == nil {
			inc := s.current()
			s.mu.Lock()
			inc.evicted, inc.compactions = max(0, gauge(mfs, "kvfs_evicted_files")), max(0, gauge(mfs, "kvfs_compactions"))
			s.mu.Unlock()
		}
		if out, err := exec.Command(kvfsBin, "unmount", s.m.mnt).CombinedOutput(); err != nil {
			s.fail("kvfs unmount: %v\n%s", err, out)
			exec.Command(kvfsBin, "unmount", "--lazy", s.m.mnt).Run()
		}
	}
	s.evlog.refresh()
	for _, pid := range []int{s.current().pid} {
		for deadline := time.Now().Add(30 * time.Second); !processGone(pid) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	fsckOut, err := exec.Command(kvfsBin, "fsck", "--verify", s.m.store).CombinedOutput()
	if err != nil {
		s.fail("kvfs fsck --verify: %v\n%s", err, fsckOut)
	}

	// Resources.
	var peakRSS int64
	var peakFDs int
	var evictedMetric, compactions float64
	var rows []string
	s.mu.Lock()
	incs := slices.Clone(s.incs)
	s.mu.Unlock()
	var growth []string
	var firstLevel int64 // the first judged incarnation's RSS level
	for n, inc := range incs {
		for _, sm := range inc.samples {
			peakRSS, peakFDs = max(peakRSS, sm.rss), max(peakFDs, sm.fds)
		}
		evictedMetric += inc.evicted
		compactions += inc.compactions
		g := s.soakGrowth(inc)
		verdict := "not judged (killed before its baseline point)"
		if g.judged {
			pct := func(a, b int64) float64 { return 100 * (float64(a)/float64(max(b, 1)) - 1) }
			verdict = fmt.Sprintf("rss median %s -> %s (%+.0f%%, raw peak %s), fds median %d -> %d (%+.0f%%, raw peak %d)",
				mib(g.rssBase), mib(g.rssMed), pct(g.rssMed, g.rssBase), mib(g.rssPeak), g.fdBase, g.fdMed, pct(g.fdMed, g.fdBase), g.fdPeak)
			if float64(g.rssMed) > 1.2*float64(g.rssBase) {
				growth = append(growth, fmt.Sprintf("daemon %d (incarnation %d): RSS (median over %v) grew from %s to %s", inc.pid, n, s.cfg.settle, mib(g.rssBase), mib(g.rssMed)))
			}
			if float64(g.fdMed) > 1.2*float64(g.fdBase) {
				growth = append(growth, fmt.Sprintf("daemon %d (incarnation %d): descriptors (median over %v) grew from %d to %d", inc.pid, n, s.cfg.settle, g.fdBase, g.fdMed))
			}
			// A kill resets the daemon's memory, but not what it
			// loads from the store: each daemon's level after its
			// warm-up must not climb over the run either.
			if firstLevel == 0 {
				firstLevel = g.rssLevel
			} else if float64(g.rssLevel) > 1.2*float64(firstLevel) {
				growth = append(growth, fmt.Sprintf("daemon %d (incarnation %d): RSS after its warm-up (median) %s, the first judged daemon's %s", inc.pid, n, mib(g.rssLevel), mib(firstLevel)))
			}
			verdict += fmt.Sprintf(", rss level %s", mib(g.rssLevel))
		}
		rows = append(rows, fmt.Sprintf("  incarnation %d: daemon %d, %s-%s, %s, %.0f evictions, %.0f compactions; %s; at most %d fds: %s",
			n, inc.pid, inc.start.Round(time.Second), inc.end.Round(time.Second), retention(n), inc.evicted, inc.compactions, verdict, inc.peakFDs, inc.peakKinds))
	}
	for _, g := range growth {
		s.fail("resource growth beyond 20%%: %s", g)
	}

	s.mu.Lock()
	verified, written, reused := s.counts["verified-bytes"], s.counts["blocks-written-bytes"], s.counts["blocks-reused-bytes"]
	kills := s.counts["kill"]
	s.mu.Unlock()
	s.evlog.mu.Lock()
	evFiles, evBlocks, logErrors := s.evlog.files, s.evlog.blocks, s.evlog.errors
	s.evlog.mu.Unlock()
	verdict := "PASS"
	if s.failed.Load() > 0 || t.Failed() {
		verdict = "FAIL"
	}
	fmt.Printf("soak summary: %s after %s (seed %d)\n", verdict, elapsed.Round(time.Second), s.cfg.seed)
	fmt.Printf("  operations: %s\n", s.countsLine())
	fmt.Printf("  bytes verified %s; blocks written %s, reused (skipped as existing) %s\n", mib(verified), mib(written), mib(reused))
	fmt.Printf("  kills %d; evictions %d logged (%d of them blocks), %.0f by the daemons' metrics; compactions %.0f; daemon log error lines %d\n",
		kills, evFiles, evBlocks, evictedMetric, compactions, logErrors)
	fmt.Printf("  peak RSS %s, peak fds %d\n", mib(peakRSS), peakFDs)
	if n := s.counts["write-tmp-evicted"]; n > 0 {
		fmt.Printf("  WARNING: %d writes failed because the daemon evicted their tmp file before its rename (not a lost acknowledged file; docs/RELIABILITY.md)\n", n)
	}
	fmt.Println(strings.Join(rows, "\n"))
	fmt.Printf("  fsck --verify: %s\n", strings.TrimSpace(string(fsckOut)))
}
