package main

import (
	"fmt"
	"io"
	"net"
	"net/http"

	kvfs "github.com/kvfs/kvfs/fs"
	"github.com/kvfs/kvfs/store"
)

// serveMetrics serves /metrics in the Prometheus text format: the
// filesystem's counters, and the store's totals read at each scrape.
func serveMetrics(addr string, s *store.Store, srv *kvfs.Server) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		srv.Metrics().WritePrometheus(w)
		if st, err := s.Stats(); err == nil {
			writeStoreGauges(w, st)
		}
	})
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	return func() { hs.Close() }, nil
}

func writeStoreGauges(w io.Writer, st *store.Stats) {
	g := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v)
	}
	g("kvfs_store_files", "Files in the store.", float64(st.Files))
	g("kvfs_store_logical_bytes", "Sum of file sizes.", float64(st.LogicalBytes))
	g("kvfs_store_stored_bytes", "Bytes of live chunks.", float64(st.StoredBytes))
	g("kvfs_store_dedup_ratio", "Logical over stored bytes.", st.DedupRatio)
	g("kvfs_store_chunks", "Chunks in the index.", float64(st.Chunks))
	g("kvfs_store_packs", "Pack files.", float64(st.Packs))
	g("kvfs_store_dead_bytes", "Released chunk bytes not yet reclaimed.", float64(st.DeadBytes))
}
