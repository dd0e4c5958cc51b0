package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

type nopNotifier struct{}

func (nopNotifier) Invalidate(string) {}

// BenchmarkMatchHTTP: POST /v1/match on the control socket, over one
// kept-alive connection, on a store of KVFS_MATCH_N (10,000) snapshots;
// reports the median round trip (request encoding and reply decoding
// included).
func BenchmarkMatchHTTP(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("KVFS_MATCH_N")); err == nil {
		n = v
	}
	s := storetest.New(b, storetest.Options{})
	qs := storetest.FillMatch(b, s, n)
	ctl, err := startControl(s, nopNotifier{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.close()
	c := newSocketClient(filepath.Join(s.Dir(), socketName), defaultSocketTimeouts())
	defer c.Close()
	bodies := make([][]byte, len(qs))
	for i, q := range qs {
		bodies[i], _ = json.Marshal(q)
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		var r store.MatchResult
		_, err := c.do("POST", "/v1/match", nil, bytes.NewReader(bodies[i%len(bodies)]), &r)
		lat = append(lat, time.Since(t0))
		if err != nil || !r.Hit || r.Tokens != 700 {
			b.Fatalf("query %d: %+v, %v", i, r, err)
		}
		i++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "median-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}
