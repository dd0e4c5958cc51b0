//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func init() {
	// metricswork DIR N: N times create a file in DIR, write 64 KiB,
	// fsync, close (N commits); then read each file back (N opens of a
	// version not read before, so N reads reach the daemon); then stat N
	// names that do not exist (N lookups, negative entries are not cached).
	clients["metricswork"] = func(args []string) error {
		dir := args[0]
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		data := bytes.Repeat([]byte("kvfs metrics 64K"), 4096)
		for i := range n {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%d", i)))
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
		for i := range n {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%d", i)))
			if err != nil {
				return err
			}
			if !bytes.Equal(b, data) {
				return fmt.Errorf("f%d reads back %d bytes, not the %d written", i, len(b), len(data))
			}
		}
		for i := range n {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("nope%d", i))); !os.IsNotExist(err) {
				return fmt.Errorf("stat nope%d: %v, want not exist", i, err)
			}
		}
		return nil
	}
}

// oldMetricNames are the metrics kvfs exported before it moved to
// client_golang; dashboards and alerts use them, so they stay.
var oldMetricNames = []string{
	"kvfs_read_requests_total", "kvfs_read_bytes_total", "kvfs_spliced_reads_total", "kvfs_write_bytes_total",
	"kvfs_commits_total", "kvfs_commit_bytes_total", "kvfs_commit_seconds_total", "kvfs_ingest_new_bytes_total",
	"kvfs_dedup_bytes_total", "kvfs_zero_bytes_total", "kvfs_adopted_spools_total", "kvfs_view_cache_hits_total",
	"kvfs_view_cache_misses_total", "kvfs_view_parses_total", "kvfs_errors_total",
	"kvfs_store_files", "kvfs_store_logical_bytes", "kvfs_store_stored_bytes", "kvfs_store_dedup_ratio",
	"kvfs_store_chunks", "kvfs_store_packs", "kvfs_store_dead_bytes",
}

// latencyHistograms are the latency distributions the daemon exports.
var latencyHistograms = []string{"kvfs_commit_duration_seconds", "kvfs_fsync_duration_seconds", "kvfs_journal_sync_duration_seconds",
	"kvfs_read_duration_seconds", "kvfs_lookup_duration_seconds"}

// TestMetricsExposition: a fresh mount's /metrics parses as Prometheus's
// text format and has every old metric name with its old type, the new
// latency histograms and the process and Go runtime collectors. After a
// client process commits, reads and looks up N files, each histogram
// counts at least N more requests, and its buckets are cumulative and end
// in +Inf at the count.
func TestMetricsExposition(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	before := scrape(t, addr)
	for _, name := range oldMetricNames {
		mf, ok := before[name]
		switch {
		case !ok:
			t.Errorf("no metric %s", name)
		case mf.GetType() != dto.MetricType_COUNTER && mf.GetType() != dto.MetricType_GAUGE:
			t.Errorf("%s is a %v", name, mf.GetType())
		case (mf.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total"):
			t.Errorf("%s is a %v: the old counters end in _total, the gauges do not", name, mf.GetType())
		}
	}
	if n := len(before["kvfs_errors_total"].GetMetric()); n == 0 {
		t.Error("kvfs_errors_total has no series on a fresh mount")
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_open_fds", "process_resident_memory_bytes",
		"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds"} {
		if _, ok := before[name]; !ok {
			t.Errorf("no %s: the process and Go collectors are not registered", name)
		}
	}

	const n = 20
	runClientOK(t, "metricswork", m.mnt, strconv.Itoa(n))
	after := scrape(t, addr)
	for _, name := range latencyHistograms {
		h0, h1 := histogram(t, before, name), histogram(t, after, name)
		grew := h1.GetSampleCount() - h0.GetSampleCount()
		t.Logf("%s: %d more, mean %.3gms", name, grew, 1e3*(h1.GetSampleSum()-h0.GetSampleSum())/float64(grew))
		if grew < n {
			t.Errorf("%s counted %d more requests, want at least %d", name, grew, n)
		}
		if h1.GetSampleSum() <= h0.GetSampleSum() {
			t.Errorf("%s: sum %g did not grow from %g", name, h1.GetSampleSum(), h0.GetSampleSum())
		}
		checkBuckets(t, name, h1)
	}
	if c := counter(after, "kvfs_commits_total") - counter(before, "kvfs_commits_total"); c < n {
		t.Errorf("kvfs_commits_total grew by %g, want at least %d", c, n)
	}
	// The old commit counters and the histogram measure the same commits.
	h := histogram(t, after, "kvfs_commit_duration_seconds")
	if c := counter(after, "kvfs_commits_total"); float64(h.GetSampleCount()) != c {
		t.Errorf("kvfs_commit_duration_seconds counts %d commits, kvfs_commits_total %g", h.GetSampleCount(), c)
	}
}

// scrape reads the daemon's /metrics and parses it with Prometheus's own
// text parser, which rejects what Prometheus would.
func scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, body, err := fetchMetrics(addr)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return mfs
}

// fetchMetrics is scrape without a testing.T, for goroutines: the parsed
// families, the raw exposition, and what is wrong with it.
func fetchMetrics(addr string) (map[string]*dto.MetricFamily, []byte, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, b, fmt.Errorf("GET /metrics: %s %v", resp.Status, err)
	}
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		return nil, b, fmt.Errorf("GET /metrics: Content-Type %q is not Prometheus's text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, b, fmt.Errorf("parse /metrics: %w", err)
	}
	return mfs, b, nil
}

// histogram is the unlabelled histogram name in mfs.
func histogram(t testing.TB, mfs map[string]*dto.MetricFamily, name string) *dto.Histogram {
	t.Helper()
	mf, ok := mfs[name]
	if !ok || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.GetMetric()) != 1 {
		t.Fatalf("no histogram %s: %v", name, mf)
	}
	return mf.GetMetric()[0].GetHistogram()
}

// counter is the value of the unlabelled counter name in mfs, or -1.
func counter(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf, ok := mfs[name]
	if !ok || len(mf.GetMetric()) != 1 {
		return -1
	}
	return mf.GetMetric()[0].GetCounter().GetValue()
}

// checkBuckets checks that h's buckets span microseconds to seconds, and
// that their cumulative counts never fall and stay within the count.
func checkBuckets(t *testing.T, name string, h *dto.Histogram) {
	t.Helper()
	b := h.GetBucket()
	if len(b) == 0 {
		t.Fatalf("%s has no buckets", name)
	}
	if len(b) < 10 || b[0].GetUpperBound() > 100e-6 || b[len(b)-1].GetUpperBound() < 5 {
		t.Errorf("%s: %d buckets from %gs to %gs; a storage daemon's latencies span 50µs to 10s", name, len(b),
			b[0].GetUpperBound(), b[len(b)-1].GetUpperBound())
	}
	counts := make([]uint64, len(b))
	for i, x := range b {
		counts[i] = x.GetCumulativeCount()
	}
	if !slices.IsSorted(counts) || counts[len(counts)-1] > h.GetSampleCount() {
		t.Errorf("%s: cumulative bucket counts %v, count %d", name, counts, h.GetSampleCount())
	}
}
