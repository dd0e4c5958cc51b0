package fs

import (
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
	"github.com/prometheus/client_golang/prometheus"
)

// lookupLike times a request the way Lookup does: one deferred line.
func lookupLike(m *Metrics) { defer m.lookupTimer().observe() }

// TestMetricsObserveAllocs: what the request paths record (a latency
// observed, a counter added to, an error counted) allocates nothing, so
// instrumenting every read and lookup costs no garbage.
func TestMetricsObserveAllocs(t *testing.T) {
	m := NewMetrics()
	st := &store.PutStats{NewBytes: 1 << 19, ReusedBytes: 1 << 19, HashedBytes: 1 << 19, Adopted: true}
	for name, f := range map[string]func(){
		"read":   func() { tm := m.readTimer(); m.ReadRequests.Inc(); m.ReadBytes.Add(4096); tm.observe() },
		"lookup": func() { lookupLike(m) },
		"commit": func() { m.countCommit(1<<20, st, 3*time.Millisecond) },
		"error":  func() { m.countError(syscall.ENOENT) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per request", name, n)
		}
	}
}

// TestMetricsCollector: Metrics describes exactly what it collects (a
// pedantic registry checks), and the histograms count what was observed.
func TestMetricsCollector(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	lookupLike(m)
	lookupLike(m)
	m.readTimer().observe()
	m.fsyncTimer().observe()
	m.JournalSynced(300 * time.Microsecond)
	m.JournalSynced(time.Millisecond)
	m.countCommit(10, &store.PutStats{NewBytes: 10}, 2*time.Millisecond)
	m.countError(syscall.Errno(200)) // not a known errno: a series of its own
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	errnos := map[string]bool{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			if h := x.GetHistogram(); h != nil {
				counts[mf.GetName()] = h.GetSampleCount()
			}
			if mf.GetName() == "kvfs_errors_total" {
				errnos[x.GetLabel()[0].GetValue()] = true
			}
		}
	}
	want := map[string]uint64{"kvfs_lookup_duration_seconds": 2, "kvfs_read_duration_seconds": 1, "kvfs_commit_duration_seconds": 1,
		"kvfs_fsync_duration_seconds": 1, "kvfs_journal_sync_duration_seconds": 2}
	for name, n := range want {
		if counts[name] != n {
			t.Errorf("%s counts %d, want %d", name, counts[name], n)
		}
	}
	for _, e := range []string{"ENOENT", "EIO", "ESTALE", "errno200"} {
		if !errnos[e] {
			t.Errorf("kvfs_errors_total has no errno=%q series: %v", e, errnos)
		}
	}
}

// BenchmarkReadObserve is the metrics' cost on the read path: a timer
// started and observed, and the read counters added to.
func BenchmarkReadObserve(b *testing.B) {
	m := NewMetrics()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tm := m.readTimer()
			m.ReadRequests.Inc()
			m.ReadBytes.Add(1 << 20)
			tm.observe()
		}
	})
}
