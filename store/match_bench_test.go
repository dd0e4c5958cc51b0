package store_test

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// matchN is the number of snapshots of the lookup benchmarks:
// KVFS_MATCH_N, 10,000 by default.
func matchN() int {
	if v, err := strconv.Atoi(os.Getenv("KVFS_MATCH_N")); err == nil {
		return v
	}
	return 10000
}

// BenchmarkMatch: in-process lookups on a store of matchN snapshots, each
// query a different prompt, as an ordinary user; reports the median.
// b.Loop runs the setup once.
func BenchmarkMatch(b *testing.B) {
	s := storetest.New(b, storetest.Options{})
	qs := storetest.FillMatch(b, s, matchN())
	var lat []time.Duration
	i := 0
	for b.Loop() {
		q := qs[i%len(qs)]
		t0 := time.Now()
		r, err := s.Match(q, &store.Cred{UID: 1000, GID: 1000})
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

// BenchmarkMatchSharedOnly: the worst case, a prompt that shares only the
// system prompt that every snapshot holds (256 tokens, one group): every
// snapshot is a candidate under h(1) and is read.
func BenchmarkMatchSharedOnly(b *testing.B) {
	s := storetest.New(b, storetest.Options{})
	qs := storetest.FillMatch(b, s, matchN())
	var lat []time.Duration
	i := 0
	for b.Loop() {
		q := qs[i%len(qs)]
		q.Tokens = append(q.Tokens[:256:256], q.Tokens[700:]...) // the system prompt, then 100 others
		t0 := time.Now()
		r, err := s.Match(q, &store.Cred{UID: 1000, GID: 1000})
		lat = append(lat, time.Since(t0))
		if err != nil || !r.Hit || r.Tokens < 256 { // a next token may match by chance
			b.Fatalf("query %d: %+v, %v", i, r, err)
		}
		i++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "median-µs")
}
