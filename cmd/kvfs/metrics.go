package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	kvfs "github.com/kvfs/kvfs/fs"
	"github.com/kvfs/kvfs/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves /metrics for Prometheus from a registry of the
// daemon's own (never the global default one): the filesystem's counters
// and latency histograms, the store's totals read at each scrape, and the
// process and Go runtime collectors.
func serveMetrics(addr string, s *store.Store, srv *kvfs.Server, log *slog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg, s, srv); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	// A store that cannot be read leaves its gauges out of the scrape,
	// with a log line; the rest is still served.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg, // promhttp_metric_handler_errors_total
	}))
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	return func() { hs.Close() }, nil
}

// registerMetrics registers everything the daemon exports on reg.
func registerMetrics(reg *prometheus.Registry, s *store.Store, srv *kvfs.Server) error {
	for _, c := range []prometheus.Collector{
		srv.Metrics(),
		newStoreCollector(s),
		newMatchCollector(s),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// storeCollector exports the store's totals as gauges. They are read in
// one transaction at each scrape, so they are never stale.
type storeCollector struct {
	s      *store.Store
	gauges []storeGauge
}

// storeGauge is one of the store's gauges and how it is read from the
// store's totals.
type storeGauge struct {
	desc  *prometheus.Desc
	value func(*store.Stats) float64
}

func newStoreCollector(s *store.Store) *storeCollector {
	g := func(name, help string, value func(*store.Stats) float64) storeGauge {
		return storeGauge{prometheus.NewDesc(name, help, nil, nil), value}
	}
	return &storeCollector{s: s, gauges: []storeGauge{
		g("kvfs_store_files", "Files in the store.", func(st *store.Stats) float64 { return float64(st.Files) }),
		g("kvfs_store_logical_bytes", "Sum of file sizes.", func(st *store.Stats) float64 { return float64(st.LogicalBytes) }),
		g("kvfs_store_stored_bytes", "Bytes of live chunks.", func(st *store.Stats) float64 { return float64(st.StoredBytes) }),
		g("kvfs_store_dedup_ratio", "Logical over stored bytes.", func(st *store.Stats) float64 { return st.DedupRatio }),
		g("kvfs_store_chunks", "Chunks in the index.", func(st *store.Stats) float64 { return float64(st.Chunks) }),
		g("kvfs_store_packs", "Pack files.", func(st *store.Stats) float64 { return float64(st.Packs) }),
		g("kvfs_store_dead_bytes", "Released chunk bytes not yet reclaimed.", func(st *store.Stats) float64 { return float64(st.DeadBytes) }),
		g("kvfs_store_capacity_bytes", "The store's capacity setting (0: unlimited).", func(st *store.Stats) float64 { return float64(st.Capacity) }),
		g("kvfs_evicted_files", "Files evicted to keep under capacity since the mount.", func(st *store.Stats) float64 { return float64(st.Evictions.Files) }),
		g("kvfs_evicted_bytes", "Stored bytes evicted files freed since the mount.", func(st *store.Stats) float64 { return float64(st.Evictions.Bytes) }),
		g("kvfs_compactions", "Compactions finished since the mount (background and kvfs gc).", func(st *store.Stats) float64 { return float64(st.Compactions.Runs) }),
		g("kvfs_compacted_packs_rewritten", "Packs whose live chunks compaction copied out since the mount.", func(st *store.Stats) float64 { return float64(st.Compactions.PacksRewritten) }),
		g("kvfs_compacted_packs_deleted", "Pack files compaction removed since the mount.", func(st *store.Stats) float64 { return float64(st.Compactions.PacksDeleted) }),
		g("kvfs_compacted_bytes_copied", "Live chunk bytes compaction copied since the mount.", func(st *store.Stats) float64 { return float64(st.Compactions.BytesCopied) }),
		g("kvfs_compacted_bytes_reclaimed", "Disk space compaction gave back since the mount.", func(st *store.Stats) float64 { return float64(st.Compactions.BytesReclaimed) }),
	}}
}

// Describe implements prometheus.Collector.
func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
}

// Collect implements prometheus.Collector. A store whose totals cannot be
// read reports one error (promhttp logs it) and no gauges.
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.s.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.gauges[0].desc, fmt.Errorf("store stats %s: %w", c.s.Dir(), err))
		return
	}
	for _, g := range c.gauges {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(st))
	}
}
