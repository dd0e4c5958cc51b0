package gc_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// BenchmarkEvictDecision: the time to choose what to evict in a store of
// 10,000 files (issue 10: at most 10 ms per evicted file), for a pass that
// evicts 1 file and one that evicts 100. ms/evicted is the pass's time over
// the files it evicts.
//
// table: a pass as gc.Evict makes it, from the store's candidate table
// (store.ChooseFromTable: refresh what commits changed, list the
// candidates, read the exact bytes of those reached; gc.PlanBounded), the
// table built before. table-after-commit: the same with one file rewritten
// before each pass (not timed), whose entry the pass re-reads. walk: the
// candidates gathered by a walk of the index (store.Candidates), as
// before the table, and gc.Plan. build: building the table at the first
// pass after the store opens (ms/build; paid once per daemon start).
//
//	go test ./gc -run '^$' -bench 'BenchmarkEvictDecision|BenchmarkPlan' -benchtime 20x
func BenchmarkEvictDecision(b *testing.B) {
	const files = 10000
	dir := filepath.Join(b.TempDir(), "store")
	s := storetest.New(b, storetest.Options{ChunkSize: 4096, Dir: dir})
	ctx := context.Background()
	put := func(i int, seed uint64) {
		data := randBytes(8<<10, seed)
		if _, _, err := s.Put(ctx, bytes.NewReader(data), int64(len(data)), fmt.Sprintf("/d%d/f%d", i%100, i), store.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range files {
		put(i, uint64(i))
	}
	b.Run("build", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			var err error
			if s, err = store.Open(dir, store.Options{}); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if _, err := s.LiveBytes(); err != nil {
				b.Fatal(err)
			}
			total += time.Since(t0)
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/build")
	})
	seed := uint64(files)
	for _, policy := range []string{gc.LRU, gc.CostSize} {
		for _, evict := range []int{1, 100} {
			for _, mode := range []string{"table", "table-after-commit", "walk"} {
				b.Run(fmt.Sprintf("%s/%s/evict=%d", mode, policy, evict), func(b *testing.B) {
					var total time.Duration
					for b.Loop() {
						if mode == "table-after-commit" {
							seed++
							put(int(seed%files), seed)
						}
						t0 := time.Now()
						var v []gc.Victim
						n := 0
						var err error
						if mode == "walk" {
							var cands []gc.Candidate
							cands, _, err = s.Candidates()
							if err == nil {
								n = len(cands)
								v, _, err = gc.Plan(policy, cands, int64(evict)*8<<10, 0)
							}
						} else {
							err = s.ChooseFromTable(func(c store.TableChoice) error {
								n = len(c.Cands)
								var err error
								v, _, err = gc.PlanBounded(policy, c.Cands, int64(evict)*8<<10, 0, c.Exact)
								return err
							})
						}
						if err != nil || len(v) != evict || n != files {
							b.Fatalf("%d victims of %d candidates: %v", len(v), n, err)
						}
						total += time.Since(t0)
					}
					b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N)/float64(evict), "ms/evicted")
				})
			}
		}
	}
}

// BenchmarkEvictDecisionSeries: as BenchmarkEvictDecision, in a store of
// 10,000 files in prefix-growth series (1,000 series of 10 files, file k
// of a series its first k chunks of 4 KiB): each file shares all its
// chunks but the last with the next of its series, so what it frees is far
// below the bytes of its chunks, the table's bound.
//
//	go test ./gc -run '^$' -bench BenchmarkEvictDecisionSeries -benchtime 20x
func BenchmarkEvictDecisionSeries(b *testing.B) {
	const series, per = 1000, 10
	s := storetest.New(b, storetest.Options{ChunkSize: 4096})
	ctx := context.Background()
	for i := range series {
		data := randBytes(per*4096, uint64(i))
		for k := 1; k <= per; k++ {
			if _, _, err := s.Put(ctx, bytes.NewReader(data[:k*4096]), int64(k*4096), fmt.Sprintf("/s%d/f%d", i, k), store.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := s.LiveBytes(); err != nil {
		b.Fatal(err)
	}
	for _, policy := range []string{gc.LRU, gc.CostSize} {
		for _, mode := range []string{"table", "walk"} {
			b.Run(fmt.Sprintf("%s/%s/evict=1", mode, policy), func(b *testing.B) {
				for b.Loop() {
					var v []gc.Victim
					var err error
					if mode == "walk" {
						var cands []gc.Candidate
						if cands, _, err = s.Candidates(); err == nil {
							v, _, err = gc.Plan(policy, cands, 4096, 0)
						}
					} else {
						err = s.ChooseFromTable(func(c store.TableChoice) error {
							var err error
							v, _, err = gc.PlanBounded(policy, c.Cands, 4096, 0, c.Exact)
							return err
						})
					}
					if err != nil || len(v) == 0 {
						b.Fatalf("%d victims: %v", len(v), err)
					}
				}
			})
		}
	}
}

// BenchmarkPlan: gc.Plan alone over 10,000 candidates.
func BenchmarkPlan(b *testing.B) {
	cands := make([]gc.Candidate, 10000)
	for i := range cands {
		cands[i] = gc.Candidate{Ino: uint64(i + 1), LastUse: int64(i * 7919 % 10007), Uses: uint64(i%5 + 1), Cost: float64(i%300 + 1), Bytes: int64(i%64+1) << 12}
	}
	for _, policy := range []string{gc.LRU, gc.CostSize} {
		b.Run(policy, func(b *testing.B) {
			for b.Loop() {
				if v, _, err := gc.Plan(policy, cands, 100<<20, 0); err != nil || len(v) == 0 {
					b.Fatal(err)
				}
			}
		})
	}
}
