//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/journal"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
)

// The fsync, journal sync and commit latency histograms (d2f299d) stay
// well formed and count what they should through fsync storms, SIGTERM and
// SIGKILL of the daemon, and the journal's OnSync hook reports every
// successful sync once and no failed one. Found by red team 27.

func init() {
	// fsync-storm DIR EXPDIR ID NFILES MS: NFILES files in DIR (opened
	// through a descriptor of DIR, so that a detached mount keeps serving
	// them), for MS milliseconds: pwrite at unaligned offsets (holes
	// included), then fsync or fdatasync; every 7th op closes the file
	// without a sync and reopens it (a close-time commit). At the end the
	// expected content of each file goes to EXPDIR/ID-I and "FSYNCS N"
	// (the fsyncs that returned 0) to stdout. Stops at the first error
	// (after writing what it has) with a non-zero exit.
	clients["fsync-storm"] = func(args []string) error {
		dir, exp, id := args[0], args[1], args[2]
		nf, _ := strconv.Atoi(args[3])
		ms, _ := strconv.Atoi(args[4])
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(id))))
		fds := make([]int, nf)
		model := make([][]byte, nf)
		name := func(i int) string { return fmt.Sprintf("s%s-%d", id, i) }
		for i := range fds {
			if fds[i], err = unix.Openat(int(d.Fd()), name(i), unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644); err != nil {
				return err
			}
		}
		fsyncs := 0
		var opErr error
		end := time.Now().Add(time.Duration(ms) * time.Millisecond)
		for op := 0; time.Now().Before(end); op++ {
			i := r.IntN(nf)
			off := r.IntN(len(model[i]) + 5001)
			n := 1 + r.IntN(20000)
			b := make([]byte, n)
			for k := range b {
				b[k] = byte(r.Uint32())
			}
			if w, err := unix.Pwrite(fds[i], b, int64(off)); err != nil || w != n {
				opErr = fmt.Errorf("pwrite %s at %d: %d of %d: %v", name(i), off, w, n, err)
				break
			}
			if off+n > len(model[i]) {
				model[i] = append(model[i], make([]byte, off+n-len(model[i]))...)
			}
			copy(model[i][off:], b)
			if op%7 == 6 {
				if err := unix.Close(fds[i]); err != nil {
					opErr = fmt.Errorf("close %s: %v", name(i), err)
					fds[i] = -1
					break
				}
				if fds[i], err = unix.Openat(int(d.Fd()), name(i), unix.O_RDWR, 0); err != nil {
					opErr = fmt.Errorf("reopen %s: %v", name(i), err)
					break
				}
				continue
			}
			if op%2 == 0 {
				err = unix.Fsync(fds[i])
			} else {
				err = unix.Fdatasync(fds[i])
			}
			if err != nil {
				opErr = fmt.Errorf("fsync %s: %v", name(i), err)
				break
			}
			fsyncs++
		}
		for i, fd := range fds {
			if fd >= 0 {
				if err := unix.Close(fd); err != nil && opErr == nil {
					opErr = fmt.Errorf("close %s: %v", name(i), err)
				}
			}
		}
		for i := range model {
			if err := os.WriteFile(filepath.Join(exp, name(i)), model[i], 0o644); err != nil {
				return err
			}
		}
		fmt.Printf("FSYNCS %d\n", fsyncs)
		return opErr
	}
	// storm-verify DIR EXPDIR: every file in EXPDIR reads back the same
	// from DIR.
	clients["storm-verify"] = func(args []string) error {
		ents, err := os.ReadDir(args[1])
		if err != nil {
			return err
		}
		for _, e := range ents {
			want, err := os.ReadFile(filepath.Join(args[1], e.Name()))
			if err != nil {
				return err
			}
			got, err := os.ReadFile(filepath.Join(args[0], e.Name()))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%s reads back %d bytes, not the %d written (first difference at %d)", e.Name(), len(got), len(want), firstDiffB(got, want))
			}
		}
		fmt.Printf("VERIFIED %d\n", len(ents))
		return nil
	}
	// storm-killw DIR LOG SEED: 4 writers, each in a loop: create a file,
	// write killContent(k) in unaligned pieces in shuffled order, fsync,
	// log "D NAME K" once the fsync returned, close. Until an error.
	clients["storm-killw"] = func(args []string) error {
		dir, logPath := args[0], args[1]
		seed, _ := strconv.ParseUint(args[2], 10, 64)
		log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				for i := 0; ; i++ {
					k := r.Uint64()
					b := killContent(k)
					name := fmt.Sprintf("k%d-%d-%d", seed, w, i)
					f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
					if err != nil {
						return
					}
					var cuts []int
					for off := 0; off < len(b); off += 1 + r.IntN(70000) {
						cuts = append(cuts, off)
					}
					r.Shuffle(len(cuts), func(a, c int) { cuts[a], cuts[c] = cuts[c], cuts[a] })
					for _, off := range cuts {
						end := len(b)
						for _, c := range cuts {
							if c > off && c < end {
								end = c
							}
						}
						if _, err = f.WriteAt(b[off:end], int64(off)); err != nil {
							break
						}
					}
					if err == nil {
						err = f.Sync()
					}
					if err != nil {
						f.Close()
						return
					}
					log.WriteString(fmt.Sprintf("D %s %d\n", name, k))
					if f.Close() != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		return nil
	}
}

// checkHist checks one scraped histogram: a single unlabelled series,
// cumulative buckets that never fall, within the count, +Inf (when the
// parser keeps it) equal to the count, and a finite, non-negative sum.
func checkHist(mfs map[string]*dto.MetricFamily, name string) (*dto.Histogram, error) {
	mf, ok := mfs[name]
	if !ok || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.GetMetric()) != 1 {
		return nil, fmt.Errorf("no histogram %s: %v", name, mf)
	}
	h := mf.GetMetric()[0].GetHistogram()
	var prev uint64
	var prevBound = math.Inf(-1)
	for _, b := range h.GetBucket() {
		c := b.GetCumulativeCount()
		if c < prev || b.GetUpperBound() <= prevBound {
			return nil, fmt.Errorf("%s: bucket le=%g count %d after le=%g count %d", name, b.GetUpperBound(), c, prevBound, prev)
		}
		if math.IsInf(b.GetUpperBound(), +1) && c != h.GetSampleCount() {
			return nil, fmt.Errorf("%s: +Inf bucket %d != count %d", name, c, h.GetSampleCount())
		}
		prev, prevBound = c, b.GetUpperBound()
	}
	if prev > h.GetSampleCount() {
		return nil, fmt.Errorf("%s: last bucket %d > count %d", name, prev, h.GetSampleCount())
	}
	if s := h.GetSampleSum(); s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return nil, fmt.Errorf("%s: sum %g", name, s)
	}
	if h.GetSampleCount() > 0 && h.GetSampleSum() == 0 {
		return nil, fmt.Errorf("%s: %d samples summing to 0", name, h.GetSampleCount())
	}
	return h, nil
}

// checkInfFromText checks the raw exposition: each histogram's +Inf
// bucket line equals its _count line.
func checkInfFromText(body []byte, name string) error {
	var inf, count string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, name+`_bucket{le="+Inf"} `):
			inf = strings.Fields(l)[1]
		case strings.HasPrefix(l, name+"_count "):
			count = strings.Fields(l)[1]
		}
	}
	if inf == "" || inf != count {
		return fmt.Errorf("%s: +Inf bucket %q, count %q", name, inf, count)
	}
	return nil
}

var syncHists = []string{"kvfs_fsync_duration_seconds", "kvfs_journal_sync_duration_seconds", "kvfs_commit_duration_seconds"}

// histScraper scrapes addr in a loop until stop is closed and reports
// every malformed exposition, malformed histogram and count or sum that
// fell. It returns the number of scrapes.
func histScraper(addr string, stop <-chan struct{}, errs chan<- error) int {
	last := map[string][2]float64{}
	n := 0
	for {
		select {
		case <-stop:
			return n
		default:
		}
		mfs, body, err := fetchMetrics(addr)
		if err != nil {
			errs <- fmt.Errorf("scrape %d: %v\n%.2000s", n, err, body)
			return n
		}
		n++
		for _, name := range syncHists {
			h, err := checkHist(mfs, name)
			if err == nil {
				err = checkInfFromText(body, name)
			}
			if err != nil {
				errs <- fmt.Errorf("scrape %d: %v", n, err)
				return n
			}
			c, s := float64(h.GetSampleCount()), h.GetSampleSum()
			if l, ok := last[name]; ok && (c < l[0] || s < l[1]) {
				errs <- fmt.Errorf("scrape %d: %s went from count %g sum %g to count %g sum %g", n, name, l[0], l[1], c, s)
				return n
			}
			last[name] = [2]float64{c, s}
		}
		if c := counter(mfs, "kvfs_commits_total"); c < last["commits"][0] {
			errs <- fmt.Errorf("scrape %d: kvfs_commits_total fell to %g", n, c)
			return n
		} else {
			last["commits"] = [2]float64{c}
		}
	}
}

// waitStorm waits for the storm clients and returns the fsyncs they
// report in all; a client that failed fails the test.
func waitStorm(t *testing.T, cmds []*exec.Cmd, outs []*bytes.Buffer) int {
	t.Helper()
	fsyncs := 0
	for p, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("client %d: %v\n%s", p, err, outs[p])
			continue
		}
		fsyncs += stormFsyncs(t, outs[p].String())
	}
	return fsyncs
}

func stormFsyncs(t *testing.T, out string) int {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if n, ok := strings.CutPrefix(l, "FSYNCS "); ok {
			v, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("client reported no FSYNCS line:\n%s", out)
	return 0
}

// TestSyncHistFsyncStormScrape: 8 processes fsync (and fdatasync) 4 files
// each, written at unaligned offsets, for 3 s, with checkpoints every
// 20 ms, while this process scrapes /metrics as fast as it can. Every
// scrape parses, every histogram is well formed and never falls. After:
// the fsync histogram counts at least every fsync that returned, the
// journal sync histogram at least one and at most the fsyncs plus the
// commits (every group commit serves at least one of them, or a
// checkpoint's or close's sync), and every file reads back from a fresh
// process as written.
func TestSyncHistFsyncStormScrape(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr, "--checkpoint-interval", "20ms")
	exp := t.TempDir()
	before, _, err := fetchMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var scrapes atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); scrapes.Add(int64(histScraper(addr, stop, errs))) }()
	}
	const procs = 8
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for p := range procs {
		c, out := startClient(t, "fsync-storm", m.mnt, exp, fmt.Sprint(p), "4", "3000")
		cmds, outs = append(cmds, c), append(outs, out)
	}
	stopDog := stormWatchdog(t, m, cmds, 30*time.Second)
	fsyncs := waitStorm(t, cmds, outs)
	stopDog()
	if t.Failed() {
		close(stop)
		wg.Wait()
		t.FailNow()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	after, _, err := fetchMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	d := func(name string) uint64 {
		h0, err0 := checkHist(before, name)
		h1, err1 := checkHist(after, name)
		if err := errors.Join(err0, err1); err != nil {
			t.Fatal(err)
		}
		return h1.GetSampleCount() - h0.GetSampleCount()
	}
	fs, js, cs := d("kvfs_fsync_duration_seconds"), d("kvfs_journal_sync_duration_seconds"), d("kvfs_commit_duration_seconds")
	commits := counter(after, "kvfs_commits_total") - counter(before, "kvfs_commits_total")
	t.Logf("%d scrapes; %d fsyncs returned; histograms: fsync %d, journal sync %d, commit %d; commits %g",
		scrapes.Load(), fsyncs, fs, js, cs, commits)
	if fs < uint64(fsyncs) {
		t.Errorf("kvfs_fsync_duration_seconds counted %d, but %d fsyncs returned", fs, fsyncs)
	}
	if js < 1 {
		t.Errorf("kvfs_journal_sync_duration_seconds counted %d group commits under an fsync storm", js)
	}
	if slack := uint64(50); js > fs+uint64(commits)+slack {
		t.Errorf("kvfs_journal_sync_duration_seconds counted %d group commits, more than %d fsyncs + %g commits + %d",
			js, fs, commits, slack)
	}
	if fsyncs > 0 {
		runClientOK(t, "storm-verify", m.mnt, exp)
	}
}

// TestSyncHistSigtermDuringStorm: SIGTERM the daemon 500 ms into an fsync
// storm with checkpoints every 20 ms. The clients hold their files (and
// the directory) open, so the unmount is busy and the daemon retries it
// (it detaches only after many seconds); it must keep answering every
// fsync, exit once the clients are done (no deadlock between the
// journal, its sync hook and shutdown), and leave a store that checks
// clean and holds every file as written.
func TestSyncHistSigtermDuringStorm(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr, "--checkpoint-interval", "20ms")
	exp := t.TempDir()
	pid := daemonPID(t, m)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for p := range 6 {
		c, out := startClient(t, "fsync-storm", m.mnt, exp, fmt.Sprint(p), "3", "2500")
		cmds, outs = append(cmds, c), append(outs, out)
	}
	time.Sleep(500 * time.Millisecond)
	stopDog := stormWatchdog(t, m, cmds, 30*time.Second)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	fsyncs := waitStorm(t, cmds, outs)
	stopDog()
	if t.Failed() {
		t.FailNow()
	}
	deadline := time.Now().Add(30 * time.Second)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGQUIT)
			time.Sleep(time.Second)
			log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
			t.Fatalf("daemon %d still running 30 s after SIGTERM and its clients' exit\n%s", pid, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
	t.Logf("%d fsyncs returned", fsyncs)
	s := m.openStore(t)
	defer s.Close()
	ents, err := os.ReadDir(exp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		want, _ := os.ReadFile(filepath.Join(exp, e.Name()))
		got, err := readStored(s, e.Name())
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s holds %d bytes, not the %d written (first difference at %d)", e.Name(), len(got), len(want), firstDiffB(got, want))
		}
	}
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if !bytes.Contains(log, []byte("unmounted")) {
		t.Errorf("daemon did not log its unmount:\n%s", log)
	}
	t.Logf("busy unmount detached: %v", bytes.Contains(log, []byte("detaching")))
}

// stormWatchdog fails the test if the clients have not exited by d (a
// deadlock in the daemon leaves their fsyncs unanswered): it kills the
// daemon (SIGKILL, which ends its FUSE requests) and the clients. The
// returned func stops it.
func stormWatchdog(t *testing.T, m *mount, cmds []*exec.Cmd, d time.Duration) func() {
	pid := daemonPID(t, m)
	done := make(chan struct{})
	fired := make(chan struct{})
	var killed bool
	go func() {
		select {
		case <-done:
			close(fired)
		case <-time.After(d):
			killed = true
			syscall.Kill(pid, syscall.SIGQUIT) // a goroutine dump, where the daemon logs its stderr
			time.Sleep(500 * time.Millisecond)
			syscall.Kill(pid, syscall.SIGKILL)
			for _, c := range cmds {
				c.Process.Kill()
			}
			t.Errorf("clients still running %v after they started: the daemon stopped answering (deadlock?); killed it", d)
			close(fired)
		}
	}()
	return func() {
		close(done)
		<-fired
		if killed {
			exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		}
	}
}

// pidAlive: pid exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestSyncHistKillRemount: SIGKILL the daemon during an fsync storm of files
// written in unaligned, shuffled pieces, with checkpoints every 20 ms,
// twice; remount with --metrics: every file whose fsync returned reads
// back intact from a fresh process, the new daemon's histograms parse
// and count its own fsyncs, and the store checks clean at cleanup.
func TestSyncHistKillRemount(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr, "--checkpoint-interval", "20ms")
	logPath := filepath.Join(t.TempDir(), "d.log")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
	for round := range 2 {
		if round > 0 {
			m.start(t, "--metrics", addr, "--checkpoint-interval", "20ms")
		}
		c, out := startClient(t, "storm-killw", m.mnt, logPath, fmt.Sprint(r.Uint64()))
		stop := make(chan struct{})
		errs := make(chan error, 1)
		done := make(chan struct{})
		go func() { histScraper(addr, stop, errs); close(done) }()
		time.Sleep(time.Duration(400+r.IntN(600)) * time.Millisecond)
		close(stop)
		<-done
		syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
		c.Wait()
		_ = out
		exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
	m.start(t, "--metrics", addr)
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	exp := t.TempDir()
	n := 0
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		fl := strings.Fields(sc.Text())
		if len(fl) != 3 || fl[0] != "D" {
			continue
		}
		k, err := strconv.ParseUint(fl[2], 10, 64)
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(exp, fl[1]), killContent(k), 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	t.Logf("%d files durable", n)
	if n == 0 {
		t.Fatal("no fsync returned before the kills")
	}
	runClientOK(t, "storm-verify", m.mnt, exp)
	before, _, err := fetchMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	runClientOK(t, "metricswork", m.mnt, "5")
	after, _, err := fetchMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range syncHists {
		h0, err0 := checkHist(before, name)
		h1, err1 := checkHist(after, name)
		if err := errors.Join(err0, err1); err != nil {
			t.Fatal(err)
		}
		if h1.GetSampleCount()-h0.GetSampleCount() < 1 {
			t.Errorf("%s: the remounted daemon counted nothing for 5 fsynced commits", name)
		}
	}
}

// syncHookJournal opens a journal in a fresh directory whose segments are
// small (records cross segments often) and whose SyncFile fails on the
// calls that fail says; it counts OnSync's reports and SyncFile's calls.
type syncHookJournal struct {
	j              *journal.Journal
	reports, syncs atomic.Int64
	failAt         atomic.Int64 // fail the SyncFile call with this number (1-based); 0: none
	inHook         atomic.Bool
	hookStats      atomic.Bool // the hook calls Stats: it must not hold the journal's lock
}

func openSyncHookJournal(t *testing.T, hookStats bool) *syncHookJournal {
	t.Helper()
	rj := &syncHookJournal{}
	rj.hookStats.Store(hookStats)
	o := journal.Options{SegmentSize: 64 << 10, MaxPayload: 4096, WriteThrough: true}
	o.SyncFile = func(f *os.File) error {
		// Syncs of segments being made (sized, zeroed) hold no records;
		// a failed one is retried. Only the syncs of records count.
		pcs := make([]uintptr, 32)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
		for {
			fr, more := frames.Next()
			if strings.Contains(fr.Function, "ensureSize") {
				return f.Sync()
			}
			if !more {
				break
			}
		}
		n := rj.syncs.Add(1)
		if n == rj.failAt.Load() {
			return syscall.EIO
		}
		return f.Sync()
	}
	o.OnSync = func(d time.Duration) {
		rj.inHook.Store(true)
		defer rj.inHook.Store(false)
		if d <= 0 {
			t.Errorf("OnSync(%v)", d)
		}
		if rj.hookStats.Load() {
			done := make(chan struct{})
			go func() { rj.j.Stats(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				rj.hookStats.Store(false) // once is enough
				t.Error("OnSync called with the journal's lock held: Stats blocked for 2 s")
			}
		}
		rj.reports.Add(1)
	}
	j, err := journal.Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	rj.j = j
	return rj
}

// TestSyncHistJournalOnSyncFailureOrders: a sync that fails anywhere (the
// first segment of several, a later one, the old segment at a switch
// during a plain Write, the final sync at Close) is never reported, and
// every success is reported exactly once; the hook runs without the
// journal's lock (it can call Stats).
func TestSyncHistJournalOnSyncFailureOrders(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 3000)
	appendN := func(rj *syncHookJournal, n int) uint64 {
		var seq uint64
		for range n {
			s, err := rj.j.AppendDeferred(payload)
			if err != nil {
				t.Fatal(err)
			}
			seq = s
		}
		return seq
	}
	t.Run("success", func(t *testing.T) {
		rj := openSyncHookJournal(t, true)
		base := rj.reports.Load()
		for i := range 5 {
			seq := appendN(rj, 1+i*20) // up to 80 records of 3000 bytes: several segments
			if err := rj.j.Sync(seq); err != nil {
				t.Fatal(err)
			}
			if got := rj.reports.Load() - base; got != int64(i+1) {
				t.Fatalf("after %d syncs, %d reports", i+1, got)
			}
		}
		seq := appendN(rj, 3)
		_ = seq
		if err := rj.j.Close(); err != nil {
			t.Fatal(err)
		}
		if got := rj.reports.Load() - base; got != 6 {
			t.Fatalf("Close's sync of buffered records: %d reports in all, want 6", got)
		}
	})
	// Fail the k-th SyncFile call of a Sync whose batch spans several
	// segments: the switch syncs the old ones, then syncDirty the rest.
	for k := int64(1); k <= 4; k++ {
		t.Run(fmt.Sprintf("fail-sync-%d-of-batch", k), func(t *testing.T) {
			rj := openSyncHookJournal(t, false)
			seq := appendN(rj, 80)
			base, s0 := rj.reports.Load(), rj.syncs.Load()
			rj.failAt.Store(s0 + k)
			err := rj.j.Sync(seq)
			used := rj.syncs.Load() - s0
			if err == nil && used >= k {
				t.Fatalf("Sync succeeded though SyncFile call %d of %d failed", k, used)
			}
			if err == nil {
				t.Fatalf("only %d SyncFile calls", used) // cannot happen with 80 records of 3000 bytes in 64 KiB segments
			}
			if got := rj.reports.Load() - base; got != 0 {
				t.Fatalf("failed sync (SyncFile call %d of %d) reported %d times", k, used, got)
			}
			if err := rj.j.Sync(seq); err == nil {
				t.Fatal("Sync after a failure succeeded")
			}
			rj.j.Close()
			if got := rj.reports.Load() - base; got != 0 {
				t.Fatalf("after a failure, retries and Close reported %d times", got)
			}
		})
	}
	t.Run("fail-switch-in-write", func(t *testing.T) {
		rj := openSyncHookJournal(t, false)
		base, s0 := rj.reports.Load(), rj.syncs.Load()
		rj.failAt.Store(s0 + 1) // the first sync is the old segment's at the first switch
		seq := appendN(rj, 40)
		werr := rj.j.Write(seq)
		serr := rj.j.Sync(seq)
		if werr == nil && serr == nil {
			t.Fatal("Write and Sync both succeeded though a segment switch's sync failed")
		}
		rj.j.Close()
		if got := rj.reports.Load() - base; got != 0 {
			t.Fatalf("a journal whose switch sync failed reported %d syncs", got)
		}
	})
	t.Run("fail-at-close", func(t *testing.T) {
		rj := openSyncHookJournal(t, false)
		seq := appendN(rj, 1)
		if err := rj.j.Sync(seq); err != nil {
			t.Fatal(err)
		}
		appendN(rj, 2)
		base := rj.reports.Load()
		rj.failAt.Store(rj.syncs.Load() + 1)
		if err := rj.j.Close(); err == nil {
			t.Fatal("Close succeeded though its sync failed")
		}
		if got := rj.reports.Load() - base; got != 0 {
			t.Fatalf("Close's failed sync reported %d times", got)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		rj := openSyncHookJournal(t, true)
		base, s0 := rj.reports.Load(), rj.syncs.Load()
		var wg sync.WaitGroup
		var ok atomic.Int64
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 30 {
					s, err := rj.j.Append(payload[:100+w*7+i])
					if err == nil {
						err = rj.j.Sync(s)
					}
					if err != nil {
						t.Error(err)
						return
					}
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		reports, syncs := rj.reports.Load()-base, rj.syncs.Load()-s0
		t.Logf("%d syncs returned, %d reports, %d SyncFile calls", ok.Load(), reports, syncs)
		if reports < 1 || reports > ok.Load() {
			t.Errorf("%d syncs returned, %d group commits reported", ok.Load(), reports)
		}
		if reports > syncs {
			t.Errorf("%d group commits reported, but only %d SyncFile calls", reports, syncs)
		}
		if err := rj.j.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
