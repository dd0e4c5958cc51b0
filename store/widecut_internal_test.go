package store

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
)

// TestWideCutSameAsNarrow: a wide region hashed on every core gets
// exactly the chunks, sums and parent marks of the one-goroutine cut:
// with no parent, a parent matching wholly, one matching for a while
// (then every C bytes from the mismatch, its hash reused when the
// lengths agree), a parent longer than the region, and partial chunks.
func TestWideCutSameAsNarrow(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 6))
	const C = 64 << 10
	data := make([]byte, wideRegion+3*C+12345)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	sum := func(off int64, b []byte) blockstore.ID { return blockstore.Sum(b) }
	parentOf := func(n int64, cut func(i int) int64, corrupt int) []parentChunk {
		var out []parentChunk
		var pos int64
		for i := 0; pos < n; i++ {
			k := cut(i)
			if n <= int64(len(data)) {
				k = min(k, n-pos)
			}
			id := blockstore.Sum(data[min(pos, int64(len(data))):min(pos+k, int64(len(data)))])
			if i == corrupt {
				id[0] ^= 1
			}
			out = append(out, parentChunk{id: id, n: k})
			pos += k
		}
		return out
	}
	n := int64(len(data))
	cases := map[string][]parentChunk{
		"none":               nil,
		"whole":              parentOf(n-5000, func(int) int64 { return C }, -1),
		"mismatch on grid":   parentOf(n-5000, func(int) int64 { return C }, 40),
		"mismatch, odd cuts": parentOf(n/2, func(i int) int64 { return C/2 + int64(i%7)*1000 }, 17),
		"longer than region": parentOf(n+C, func(int) int64 { return C }, -1),
		"first mismatches":   parentOf(n/3, func(int) int64 { return C }, 0),
	}
	for name, parent := range cases {
		reg := region{off: 1 << 30, n: n, row: true, parent: parent}
		want := narrowCut(reg, data, C, sum)
		got, err := wideCut(reg, data, C, sum)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: %d chunks, want %d", name, len(got), len(want))
		}
	}
}
