package fs

import (
	"fmt"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics instruments the filesystem for the daemon's Prometheus endpoint:
// counters of its work and histograms of its latencies, because operators
// judge a storage daemon by its latency distribution, not by averages.
// Metrics is a prometheus.Collector; the daemon registers it on its own
// registry (there is no global one). Counters only grow. Every method is
// safe for concurrent use, and the ones on the request paths (observing a
// latency, adding to a counter, counting one of the known errnos) do not
// allocate.
type Metrics struct {
	ReadRequests  prometheus.Counter
	ReadBytes     prometheus.Counter
	SplicedReads  prometheus.Counter // reads answered by splicing a pack file
	WriteBytes    prometheus.Counter
	Commits       prometheus.Counter
	CommitBytes   prometheus.Counter // logical bytes committed
	CommitSeconds prometheus.Counter
	NewBytes      prometheus.Counter // bytes that ingests had to store
	DedupBytes    prometheus.Counter // bytes that ingests found stored already
	ZeroBytes     prometheus.Counter
	AdoptedSpools prometheus.Counter
	HashedBytes   prometheus.Counter // bytes that commits read and hashed
	ViewHits      prometheus.Counter // /.kvfs/whole views found resolved
	ViewMisses    prometheus.Counter
	ViewParses    prometheus.Counter // snapshot headers parsed for /.kvfs/whole
	// ListingBatches counts the READDIR(PLUS) requests that listed
	// entries, ListingReads the store transactions that listings made
	// for them (dirHandle).
	ListingBatches prometheus.Counter
	ListingReads   prometheus.Counter

	errors *prometheus.CounterVec // by errno name
	// errnos are errors' counters for the errnos kvfs answers, made up
	// front: the series exist (at 0) from the start, so that a rate over
	// them is defined, and counting one needs no label lookup.
	errnos map[syscall.Errno]prometheus.Counter

	commitLatency prometheus.Histogram
	fsyncLatency  prometheus.Histogram
	journalSync   prometheus.Histogram
	readLatency   prometheus.Histogram
	lookupLatency prometheus.Histogram
}

// latencyBuckets are the histograms' upper bounds in seconds, 10µs to 10s
// in steps of 2–2.5×: a lookup answered from the index takes microseconds,
// a read from a cold pack or a synced commit milliseconds, and a commit of
// a large file seconds.
func latencyBuckets() []float64 {
	return []float64{
		10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
		1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
		1, 2.5, 5, 10,
	}
}

// knownErrnos are the errnos kvfs answers with, named as errno(3) does.
func knownErrnos() map[syscall.Errno]string {
	return map[syscall.Errno]string{syscall.ENOENT: "ENOENT", syscall.EEXIST: "EEXIST", syscall.EIO: "EIO",
		syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.ENOTEMPTY: "ENOTEMPTY", syscall.EINVAL: "EINVAL",
		syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.ENOSPC: "ENOSPC", syscall.ENODATA: "ENODATA",
		syscall.EINTR: "EINTR", syscall.EROFS: "EROFS", syscall.ERANGE: "ERANGE", syscall.ENOTSUP: "ENOTSUP",
		syscall.ESTALE: "ESTALE", syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE", syscall.EXDEV: "EXDEV",
		syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.EBADF: "EBADF", syscall.EFBIG: "EFBIG"}
}

// NewMetrics returns a filesystem's metrics, all at zero.
func NewMetrics() *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets()})
	}
	m := &Metrics{
		ReadRequests:  c("kvfs_read_requests_total", "FUSE read requests answered."),
		ReadBytes:     c("kvfs_read_bytes_total", "Bytes returned by FUSE reads."),
		SplicedReads:  c("kvfs_spliced_reads_total", "Reads answered by splicing a pack file."),
		WriteBytes:    c("kvfs_write_bytes_total", "Bytes written through the mount."),
		Commits:       c("kvfs_commits_total", "Files committed (ingested) through the mount."),
		CommitBytes:   c("kvfs_commit_bytes_total", "Logical bytes committed."),
		CommitSeconds: c("kvfs_commit_seconds_total", "Time spent committing."),
		NewBytes:      c("kvfs_ingest_new_bytes_total", "Bytes that commits had to store."),
		DedupBytes:    c("kvfs_dedup_bytes_total", "Bytes that commits found already stored."),
		ZeroBytes:     c("kvfs_zero_bytes_total", "Bytes committed as zero runs."),
		AdoptedSpools: c("kvfs_adopted_spools_total", "Commits whose spool became a pack as it was."),
		HashedBytes: c("kvfs_commit_hashed_bytes_total",
			"Bytes that commits read and hashed: the changed chunks not hashed as they were written, or whole files that are committed whole."),
		ViewHits:   c("kvfs_view_cache_hits_total", "/.kvfs/whole lookups and opens served from resolved snapshots."),
		ViewMisses: c("kvfs_view_cache_misses_total", "/.kvfs/whole lookups and opens that resolved a snapshot."),
		ViewParses: c("kvfs_view_parses_total", "Snapshot headers parsed to resolve /.kvfs/whole views."),
		ListingBatches: c("kvfs_readdir_batches_total",
			"Batches of entries that directory listings returned (READDIR and READDIRPLUS requests)."),
		ListingReads: c("kvfs_readdir_store_reads_total",
			"Store transactions of directory listings: one per listing, and one per batch of entries after the store changed."),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvfs_errors_total",
			Help: "FUSE requests that failed, by errno."}, []string{"errno"}),
		errnos: map[syscall.Errno]prometheus.Counter{},
		commitLatency: h("kvfs_commit_duration_seconds",
			"Latency of committing a written file at fsync or close: chunking, storing new chunks and the synced index update."),
		fsyncLatency: h("kvfs_fsync_duration_seconds",
			"Latency of fsync(2) of a file through the mount: its commit, if it had unstored writes, and the journal sync that makes it and the changes before it durable."),
		journalSync: h("kvfs_journal_sync_duration_seconds",
			"Latency of the journal's group commits: the write of the records gathered and the fdatasync that makes them durable, shared by every commit waiting."),
		readLatency: h("kvfs_read_duration_seconds",
			"Latency of FUSE read requests, until the reply's bytes are read (for a spliced reply, until it is sent)."),
		lookupLatency: h("kvfs_lookup_duration_seconds", "Latency of FUSE lookups of a name in a directory."),
	}
	for e, name := range knownErrnos() {
		m.errnos[e] = m.errors.WithLabelValues(name)
	}
	return m
}

// collectors are all of m's metrics.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ReadRequests, m.ReadBytes, m.SplicedReads, m.WriteBytes, m.Commits,
		m.CommitBytes, m.CommitSeconds, m.NewBytes, m.DedupBytes, m.ZeroBytes, m.AdoptedSpools, m.HashedBytes,
		m.ViewHits, m.ViewMisses, m.ViewParses, m.ListingBatches, m.ListingReads, m.errors, m.commitLatency, m.fsyncLatency,
		m.journalSync, m.readLatency, m.lookupLatency}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) countError(e syscall.Errno) {
	if c, ok := m.errnos[e]; ok {
		c.Inc()
		return
	}
	m.errors.WithLabelValues(fmt.Sprintf("errno%d", int(e))).Inc()
}

// countCommit records a commit of size bytes that took d.
func (m *Metrics) countCommit(size int64, st *store.PutStats, d time.Duration) {
	m.Commits.Inc()
	m.CommitBytes.Add(float64(size))
	m.CommitSeconds.Add(d.Seconds())
	m.commitLatency.Observe(d.Seconds())
	m.NewBytes.Add(float64(st.NewBytes))
	m.DedupBytes.Add(float64(st.ReusedBytes))
	m.ZeroBytes.Add(float64(st.ZeroBytes))
	m.HashedBytes.Add(float64(st.HashedBytes))
	if st.Adopted {
		m.AdoptedSpools.Inc()
	}
}

// timer measures one request's latency, for a histogram. It is a value,
// so that measuring allocates nothing: defer m.lookupTimer().observe().
type timer struct {
	h     prometheus.Histogram
	start time.Time
}

// observe records the time since the timer started.
func (t timer) observe() { t.h.Observe(time.Since(t.start).Seconds()) }

// readTimer starts timing a read request.
func (m *Metrics) readTimer() timer { return timer{m.readLatency, time.Now()} }

// fsyncTimer starts timing an fsync.
func (m *Metrics) fsyncTimer() timer { return timer{m.fsyncLatency, time.Now()} }

// JournalSynced records a group commit of the store's journal that took d
// (store.Options.OnJournalSync).
func (m *Metrics) JournalSynced(d time.Duration) { m.journalSync.Observe(d.Seconds()) }

// lookupTimer starts timing a lookup.
func (m *Metrics) lookupTimer() timer { return timer{m.lookupLatency, time.Now()} }
