package gc_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvfs/kvfs/gc"
)

// TestPlanBoundedIsPlan: PlanBounded over candidates whose Bytes are upper
// bounds, reading the true Bytes as it goes, returns exactly what Plan
// returns over the true candidates (the same victims in the same order,
// with the same priorities, and the same age), ties included, for both
// policies; and lru reads only its victims.
func TestPlanBoundedIsPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 3000 {
		n := 1 + r.IntN(40)
		truth := make([]gc.Candidate, n)
		bounds := make([]int64, n)
		perm := r.Perm(n) // distinct inodes, in no order
		for i := range truth {
			truth[i] = gc.Candidate{Ino: uint64(perm[i] + 1), LastUse: int64(r.IntN(5)), Uses: uint64(r.IntN(3)),
				Cost: float64(r.IntN(4)), Bytes: int64(r.IntN(4)) << 12, Base: float64(r.IntN(3)) / 1e4}
			bounds[i] = truth[i].Bytes
			if r.IntN(2) == 0 {
				bounds[i] += int64(r.IntN(4)) << 12
			}
		}
		need := int64(1+r.IntN(n*4)) << 12
		age := float64(r.IntN(2)) / 1e4
		for _, policy := range []string{gc.LRU, gc.CostSize} {
			want, wantAge, err := gc.Plan(policy, truth, need, age)
			if err != nil {
				t.Fatal(err)
			}
			cands := make([]gc.Candidate, n)
			exact := map[uint64]int64{}
			for i := range truth {
				cands[i] = truth[i]
				cands[i].Bytes = bounds[i]
				exact[truth[i].Ino] = truth[i].Bytes
			}
			reads := 0
			got, gotAge, err := gc.PlanBounded(policy, cands, need, age, func(c *gc.Candidate) error {
				reads++
				c.Bytes = exact[c.Ino]
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) || gotAge != wantAge {
				t.Fatalf("trial %d %s: PlanBounded gave %+v (age %v), Plan %+v (age %v)", trial, policy, got, gotAge, want, wantAge)
			}
			if policy == gc.LRU && reads != len(got) {
				t.Fatalf("trial %d: lru read %d candidates for %d victims", trial, reads, len(got))
			}
		}
	}
}
