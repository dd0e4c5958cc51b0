package gc

import (
	"container/heap"
	"fmt"
	"slices"

	"github.com/kvfs/kvfs/store"
)

// Retention policies: which idle files go first when a store is over its
// capacity. The policy is pure (a list of candidates in, an order out) so
// that it can be tested with hand-computed orders and timed apart from the
// store, which gathers the candidates and removes them (store/evict.go).

// Policy names (store.RetentionLRU, store.RetentionCostSize).
const (
	LRU      = store.RetentionLRU
	CostSize = store.RetentionCostSize
)

// Candidate is a file that may be evicted (store.Candidate).
type Candidate = store.Candidate

// Victim is a candidate chosen for eviction, with why (store.Victim).
type Victim = store.Victim

// Plan orders candidates for eviction under policy and returns the first
// ones whose Bytes add up to at least need, and the GreedyDual age after
// them (age for lru). Candidates are not changed.
//
// lru: oldest LastUse first (ties: lower inode first).
//
// cost-size: GreedyDual as the engine's RAM tier (FORMAT.md §5.6):
// priority = Base + Cost·Uses/Bytes, where Base is the age at the file's
// last use; the lowest priority goes first (ties: older LastUse), and the
// age advances to each evicted priority, so a file used after an eviction
// starts from a higher base than those idle since. A file that frees
// nothing (all its chunks shared) counts as 1 byte, so it goes last. A file
// never used counts one use: the write that made it.
func Plan(policy string, cands []Candidate, need int64, age float64) ([]Victim, float64, error) {
	if err := store.CheckPolicy(policy); err != nil {
		return nil, age, err
	}
	if need <= 0 || len(cands) == 0 {
		return nil, age, nil
	}
	var out []Victim
	var freed int64
	if policy == LRU {
		order := make([]int, len(cands))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return olderFirst(&cands[a], &cands[b]) })
		for _, i := range order {
			if freed >= need {
				break
			}
			out = append(out, Victim{Candidate: cands[i], Reason: "lru: least recently used"})
			freed += cands[i].Bytes
		}
		return out, age, nil
	}
	h := &gdHeap{c: cands, idx: make([]int, len(cands)), pri: make([]float64, len(cands))}
	for i := range cands {
		h.idx[i] = i
		h.pri[i] = Priority(&cands[i])
	}
	heap.Init(h)
	for h.Len() > 0 && freed < need {
		i := heap.Pop(h).(int)
		p := h.pri[i]
		if p > age {
			age = p
		}
		out = append(out, Victim{Candidate: cands[i], Priority: p, Reason: fmt.Sprintf("cost-size: lowest priority %.6g", p)})
		freed += cands[i].Bytes
	}
	return out, age, nil
}

// PlanBounded is Plan for candidates whose Bytes are upper bounds of what
// evicting them frees (store.ChooseFromTable): it calls exact to set the
// true Bytes of the candidates it reaches, and returns what Plan returns
// over the candidates with their true Bytes, reading only as many as it
// needs. lru orders without bytes, so it reads only the victims. cost-size
// pops candidates by the priority their bound gives, which is at most
// their true one (fewer bytes, higher priority), into a heap by true
// priority, and takes the head of that heap once no bound below it is
// left: no candidate not yet read can come before it. The order, ties
// included, is Plan's. cands' Bytes are overwritten.
func PlanBounded(policy string, cands []Candidate, need int64, age float64, exact func(*Candidate) error) ([]Victim, float64, error) {
	if err := store.CheckPolicy(policy); err != nil {
		return nil, age, err
	}
	if need <= 0 || len(cands) == 0 {
		return nil, age, nil
	}
	var out []Victim
	var freed int64
	if policy == LRU {
		h := &lruHeap{c: cands, idx: make([]int, len(cands))}
		for i := range h.idx {
			h.idx[i] = i
		}
		heap.Init(h)
		for h.Len() > 0 && freed < need {
			i := heap.Pop(h).(int)
			if err := exact(&cands[i]); err != nil {
				return nil, age, err
			}
			out = append(out, Victim{Candidate: cands[i], Reason: "lru: least recently used"})
			freed += cands[i].Bytes
		}
		return out, age, nil
	}
	pri := make([]float64, len(cands))
	bound := &gdHeap{c: cands, idx: make([]int, len(cands)), pri: pri}
	for i := range cands {
		bound.idx[i] = i
		pri[i] = Priority(&cands[i])
	}
	heap.Init(bound)
	read := &gdHeap{c: cands, pri: pri}
	for freed < need {
		// Read bounds while one could come before the head of the read.
		for bound.Len() > 0 && (read.Len() == 0 || lessPri(bound, bound.idx[0], read.idx[0])) {
			i := heap.Pop(bound).(int)
			if err := exact(&cands[i]); err != nil {
				return nil, age, err
			}
			pri[i] = Priority(&cands[i])
			heap.Push(read, i)
		}
		if read.Len() == 0 {
			break
		}
		i := heap.Pop(read).(int)
		p := pri[i]
		if p > age {
			age = p
		}
		out = append(out, Victim{Candidate: cands[i], Priority: p, Reason: fmt.Sprintf("cost-size: lowest priority %.6g", p)})
		freed += cands[i].Bytes
	}
	return out, age, nil
}

// lessPri is gdHeap's order on candidate indexes i and j.
func lessPri(h *gdHeap, i, j int) bool {
	if h.pri[i] != h.pri[j] {
		return h.pri[i] < h.pri[j]
	}
	return olderFirst(&h.c[i], &h.c[j]) < 0
}

// lruHeap is a min-heap of candidate indexes by olderFirst: a pass that
// evicts k of n files costs O(n + k log n), not a sort.
type lruHeap struct {
	c   []Candidate
	idx []int
}

func (h *lruHeap) Len() int           { return len(h.idx) }
func (h *lruHeap) Less(a, b int) bool { return olderFirst(&h.c[h.idx[a]], &h.c[h.idx[b]]) < 0 }
func (h *lruHeap) Swap(a, b int)      { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *lruHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *lruHeap) Pop() any {
	n := len(h.idx) - 1
	x := h.idx[n]
	h.idx = h.idx[:n]
	return x
}

// Priority is a candidate's GreedyDual priority, Base + Cost·Uses/Bytes.
func Priority(c *Candidate) float64 {
	uses := max(c.Uses, 1)
	bytes := max(c.Bytes, 1)
	cost := c.Cost
	if cost <= 0 {
		cost = 1
	}
	return c.Base + cost*float64(uses)/float64(bytes)
}

func olderFirst(a, b *Candidate) int {
	switch {
	case a.LastUse != b.LastUse:
		if a.LastUse < b.LastUse {
			return -1
		}
		return 1
	case a.Ino < b.Ino:
		return -1
	case a.Ino > b.Ino:
		return 1
	}
	return 0
}

// gdHeap is a min-heap of candidate indexes by priority, ties by age.
type gdHeap struct {
	c   []Candidate
	pri []float64 // by candidate index
	idx []int     // the heap
}

func (h *gdHeap) Len() int           { return len(h.idx) }
func (h *gdHeap) Less(a, b int) bool { return lessPri(h, h.idx[a], h.idx[b]) }
func (h *gdHeap) Swap(a, b int)      { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *gdHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *gdHeap) Pop() any {
	n := len(h.idx) - 1
	x := h.idx[n]
	h.idx = h.idx[:n]
	return x
}
