package main

import (
	"github.com/kvfs/kvfs/store"
	"github.com/prometheus/client_golang/prometheus"
)

// matchCollector exports the store's prefix lookups (store.MatchStats) as
// counters: hits, and misses by reason (docs/PREFIX.md).
type matchCollector struct {
	s            *store.Store
	hits, misses *prometheus.Desc
}

func newMatchCollector(s *store.Store) *matchCollector {
	return &matchCollector{s: s,
		hits:   prometheus.NewDesc("kvfs_match_hits_total", "Prefix lookups that found a snapshot.", nil, nil),
		misses: prometheus.NewDesc("kvfs_match_misses_total", "Prefix lookups that found none, by reason.", []string{"reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *matchCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.hits; ch <- c.misses }

// Collect implements prometheus.Collector.
func (c *matchCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.MatchStats()
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(st.Hits))
	for _, r := range store.MissReasons {
		ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(st.Misses[r]), r)
	}
}
