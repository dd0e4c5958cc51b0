package store

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestParallelCuts: the cuts made on many goroutines are exactly those of
// one pass, for data of many sizes and contents (random, zeros, a short
// repeating pattern that never cuts but at Max), and any number of
// goroutines.
func TestParallelCuts(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 4))
	for _, C := range []int64{4096, 65536, 1 << 20} {
		p, ok := cdcParams(C)
		if !ok {
			t.Fatalf("no chunker for %d", C)
		}
		for trial := range 12 {
			n := minSegment + r.IntN(9*minSegment)
			data := make([]byte, n)
			switch trial % 3 {
			case 0:
				for i := range data {
					data[i] = byte(r.Uint32())
				}
			case 1: // zeros: every cut at Max
			case 2:
				for i := range data {
					data[i] = byte(i % 251)
				}
				for range 20 { // with a few random runs
					at := r.IntN(n - 5000)
					for i := at; i < at+5000; i++ {
						data[i] = byte(r.Uint32())
					}
				}
			}
			want := p.Cuts(data)
			for _, procs := range []int{2, 3, 8, 16} {
				if got := parallelCuts(p, data, procs); !slices.Equal(got, want) {
					t.Fatalf("C %d, trial %d, %d bytes, %d goroutines: %d cuts, want %d", C, trial, n, procs, len(got), len(want))
				}
			}
		}
	}
}

func BenchmarkCuts(b *testing.B) {
	p, _ := cdcParams(65536)
	data := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		parallelCuts(p, data, 8)
	}
}
