package fs

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Metrics counts what the filesystem does, for the daemon's Prometheus
// endpoint. All counters only grow.
type Metrics struct {
	ReadRequests  atomic.Int64
	ReadBytes     atomic.Int64
	SplicedReads  atomic.Int64 // reads answered by splicing a pack file
	WriteBytes    atomic.Int64
	Commits       atomic.Int64
	CommitBytes   atomic.Int64 // logical bytes committed
	CommitNanos   atomic.Int64
	NewBytes      atomic.Int64 // bytes that ingests had to store
	DedupBytes    atomic.Int64 // bytes that ingests found stored already
	ZeroBytes     atomic.Int64
	AdoptedSpools atomic.Int64
	ViewHits      atomic.Int64 // /.kvfs/whole views found resolved
	ViewMisses    atomic.Int64
	ViewParses    atomic.Int64 // snapshot headers parsed for /.kvfs/whole

	mu     sync.Mutex // guards errors
	errors map[syscall.Errno]int64
}

func (m *Metrics) countError(e syscall.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.errors == nil {
		m.errors = map[syscall.Errno]int64{}
	}
	m.errors[e]++
}

// countCommit records an ingest.
func (m *Metrics) countCommit(size, newBytes, reused, zeros int64, adopted bool, d time.Duration) {
	m.Commits.Add(1)
	m.CommitBytes.Add(size)
	m.CommitNanos.Add(int64(d))
	m.NewBytes.Add(newBytes)
	m.DedupBytes.Add(reused)
	m.ZeroBytes.Add(zeros)
	if adopted {
		m.AdoptedSpools.Add(1)
	}
}

// WritePrometheus writes the counters in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) {
	c := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	c("kvfs_read_requests_total", "FUSE read requests answered.", m.ReadRequests.Load())
	c("kvfs_read_bytes_total", "Bytes returned by FUSE reads.", m.ReadBytes.Load())
	c("kvfs_spliced_reads_total", "Reads answered by splicing a pack file.", m.SplicedReads.Load())
	c("kvfs_write_bytes_total", "Bytes written through the mount.", m.WriteBytes.Load())
	c("kvfs_commits_total", "Files committed (ingested) through the mount.", m.Commits.Load())
	c("kvfs_commit_bytes_total", "Logical bytes committed.", m.CommitBytes.Load())
	fmt.Fprintf(w, "# HELP kvfs_commit_seconds_total Time spent committing.\n# TYPE kvfs_commit_seconds_total counter\nkvfs_commit_seconds_total %g\n",
		time.Duration(m.CommitNanos.Load()).Seconds())
	c("kvfs_ingest_new_bytes_total", "Bytes that commits had to store.", m.NewBytes.Load())
	c("kvfs_dedup_bytes_total", "Bytes that commits found already stored.", m.DedupBytes.Load())
	c("kvfs_zero_bytes_total", "Bytes committed as zero runs.", m.ZeroBytes.Load())
	c("kvfs_adopted_spools_total", "Commits whose spool became a pack as it was.", m.AdoptedSpools.Load())
	c("kvfs_view_cache_hits_total", "/.kvfs/whole lookups and opens served from resolved snapshots.", m.ViewHits.Load())
	c("kvfs_view_cache_misses_total", "/.kvfs/whole lookups and opens that resolved a snapshot.", m.ViewMisses.Load())
	c("kvfs_view_parses_total", "Snapshot headers parsed to resolve /.kvfs/whole views.", m.ViewParses.Load())
	m.mu.Lock()
	var errs []syscall.Errno
	for e := range m.errors {
		errs = append(errs, e)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i] < errs[j] })
	fmt.Fprintf(w, "# HELP kvfs_errors_total FUSE requests that failed, by errno.\n# TYPE kvfs_errors_total counter\n")
	for _, e := range errs {
		fmt.Fprintf(w, "kvfs_errors_total{errno=%q} %d\n", errnoName(e), m.errors[e])
	}
	m.mu.Unlock()
}

func errnoName(e syscall.Errno) string {
	names := map[syscall.Errno]string{syscall.ENOENT: "ENOENT", syscall.EEXIST: "EEXIST", syscall.EIO: "EIO",
		syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.ENOTEMPTY: "ENOTEMPTY", syscall.EINVAL: "EINVAL",
		syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.ENOSPC: "ENOSPC", syscall.ENODATA: "ENODATA",
		syscall.EINTR: "EINTR", syscall.EROFS: "EROFS", syscall.ERANGE: "ERANGE", syscall.ENOTSUP: "ENOTSUP"}
	if n, ok := names[e]; ok {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}
