package gc

import (
	"slices"
	"testing"
)

func inos(vs []Victim) []uint64 {
	var out []uint64
	for _, v := range vs {
		out = append(out, v.Ino)
	}
	return out
}

// LRU: oldest last use first, ties by inode; stops once the bytes freed
// reach need.
func TestPlanLRUOrder(t *testing.T) {
	cands := []Candidate{
		{Ino: 1, LastUse: 30, Bytes: 10},
		{Ino: 2, LastUse: 10, Bytes: 10},
		{Ino: 3, LastUse: 20, Bytes: 10},
		{Ino: 4, LastUse: 10, Bytes: 10},
	}
	got, _, err := Plan(LRU, cands, 25, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{2, 4, 3}; !slices.Equal(inos(got), want) {
		t.Fatalf("lru order %v, want %v", inos(got), want)
	}
	all, _, _ := Plan(LRU, cands, 1000, 0)
	if want := []uint64{2, 4, 3, 1}; !slices.Equal(inos(all), want) {
		t.Fatalf("lru order %v, want %v", inos(all), want)
	}
	if none, _, _ := Plan(LRU, cands, 0, 0); len(none) != 0 {
		t.Fatalf("need 0 evicted %v", inos(none))
	}
}

// cost-size: priority = base + cost·uses/bytes, lowest first, ties by
// older last use; the age advances to each evicted priority.
func TestPlanCostSizeOrder(t *testing.T) {
	cands := []Candidate{
		{Ino: 1, Cost: 100, Uses: 1, Bytes: 100, LastUse: 50},        // 1.0
		{Ino: 2, Cost: 1, Uses: 4, Bytes: 2, LastUse: 10},            // 2.0
		{Ino: 3, Cost: 1000, Uses: 1, Bytes: 2000, LastUse: 90},      // 0.5
		{Ino: 4, Cost: 10, Uses: 1, Bytes: 100, Base: 5, LastUse: 1}, // 5.1
		{Ino: 5, Cost: 50, Uses: 2, Bytes: 100, LastUse: 40},         // 1.0, older than 1
		{Ino: 6, Cost: 1, Uses: 0, Bytes: 0, LastUse: 0},             // frees nothing: 1/1 = 1 byte, 1 use → 1.0? no: see below
		{Ino: 7, Cost: 3, Uses: 1, Bytes: 0, LastUse: 0},             // 3.0
	}
	// Ino 6: cost 1, uses counted as 1, bytes as 1: priority 1.0, the
	// oldest of the 1.0 ties (last use 0).
	got, age, err := Plan(CostSize, cands, 1<<40, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{3, 6, 5, 1, 2, 7, 4}; !slices.Equal(inos(got), want) {
		t.Fatalf("cost-size order %v, want %v", inos(got), want)
	}
	if age != 5.1 {
		t.Fatalf("age %v after all, want 5.1", age)
	}
	// need 2150: 2000 (3) + 0 (6) + 100 (5) + 100 (1) = 2200 ≥ 2150.
	got, age, _ = Plan(CostSize, cands, 2150, 0.25)
	if want := []uint64{3, 6, 5, 1}; !slices.Equal(inos(got), want) {
		t.Fatalf("cost-size order %v, want %v", inos(got), want)
	}
	if age != 1.0 {
		t.Fatalf("age %v, want 1.0", age)
	}
	// The age never goes back.
	if _, age, _ = Plan(CostSize, cands[2:3], 1, 7); age != 7 {
		t.Fatalf("age %v, want 7 (kept)", age)
	}
}

func TestPlanUnknownPolicy(t *testing.T) {
	if _, _, err := Plan("fifo", []Candidate{{Ino: 1, Bytes: 1}}, 1, 0); err == nil {
		t.Fatal("policy fifo accepted")
	}
}
