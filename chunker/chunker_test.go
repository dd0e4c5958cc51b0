package chunker

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestGearFixed pins the gear table: a change moves every cut, and
// nothing stored before it would dedup with anything stored after.
func TestGearFixed(t *testing.T) {
	h := sha256.New()
	for _, g := range gear {
		binary.Write(h, binary.LittleEndian, g)
	}
	const want = "6273b50c36001a31d2b4a2290d667c0083559a65892c79b210c62c1ca2de6660"
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("gear table hashes to %s, want %s: the table changed", got, want)
	}
}

func TestValidate(t *testing.T) {
	good := []Params{ForAverage(64 << 10), ForAverage(16 << 10), {Min: 1, Avg: 256, Max: 257}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := []Params{{}, {Min: 1, Avg: 1000, Max: 4000}, {Min: 0, Avg: 1024, Max: 4096}, {Min: 1024, Avg: 1024, Max: 4096},
		{Min: 256, Avg: 1024, Max: 1024}, {Min: 1, Avg: 128, Max: 512}, {Min: -1, Avg: 1024, Max: 4096}}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v: valid", p)
		}
	}
}

// checkCuts fails unless ends cut data whole into chunks within p's
// bounds (the last may be shorter than Min).
func checkCuts(t *testing.T, p Params, data []byte, ends []int) {
	t.Helper()
	prev := 0
	for i, e := range ends {
		n := e - prev
		if n <= 0 || n > p.Max || (n < p.Min && i != len(ends)-1) {
			t.Fatalf("chunk %d of %d: %d bytes at %d (min %d, max %d)", i, len(ends), n, prev, p.Min, p.Max)
		}
		prev = e
	}
	if prev != len(data) {
		t.Fatalf("chunks end at %d, data at %d", prev, len(data))
	}
}

// TestCutSizes: random bytes cut into chunks within the bounds, averaging
// near Avg; bytes with no cut point (zeros) cut at Max.
func TestCutSizes(t *testing.T) {
	for _, avg := range []int{16 << 10, 64 << 10} {
		p := ForAverage(avg)
		data := randBytes(16<<20, 1)
		ends := p.Cuts(data)
		checkCuts(t, p, data, ends)
		mean := float64(len(data)) / float64(len(ends))
		t.Logf("average %d: %d chunks, mean %.0f bytes", avg, len(ends), mean)
		if mean < 0.7*float64(avg) || mean > 1.5*float64(avg) {
			t.Errorf("average %d: mean chunk %.0f bytes", avg, mean)
		}
		zeros := make([]byte, 10*p.Max+5)
		ends = p.Cuts(zeros)
		checkCuts(t, p, zeros, ends)
		if len(ends) != 11 || ends[0] != p.Max {
			t.Errorf("zeros cut at %v, want every %d", ends, p.Max)
		}
	}
}

// chunkSet returns the sha256 of each chunk of data and their bytes.
func chunkSet(p Params, data []byte) map[[32]byte]int {
	m := map[[32]byte]int{}
	prev := 0
	for _, e := range p.Cuts(data) {
		m[sha256.Sum256(data[prev:e])] = e - prev
		prev = e
	}
	return m
}

// TestShiftedCopies: the same bytes with 1 to 4096 bytes inserted at the
// front, or in the middle, or some removed, cut into chunks that are
// all shared with the original's but the one or two around the edit
// (issue 29's shifted-copy set: a store keeps ≤ 1.1x one copy).
func TestShiftedCopies(t *testing.T) {
	p := ForAverage(64 << 10)
	base := randBytes(8<<20, 2)
	orig := chunkSet(p, base)
	r := rand.New(rand.NewPCG(3, 4))
	edits := map[string][]byte{}
	for _, k := range []int{1, 7, 512, 4095, 4096} {
		edits[fmt.Sprintf("insert %d at the front", k)] = append(randBytes(k, uint64(k)), base...)
	}
	mid := len(base) / 2
	edits["insert middle"] = append(append(append([]byte(nil), base[:mid]...), randBytes(777, 9)...), base[mid:]...)
	edits["remove front"] = base[1234:]
	edits["random splice"] = append(append([]byte(nil), base[:r.IntN(mid)]...), base[mid+r.IntN(mid):]...)
	for name, data := range edits {
		var shared, total int
		prev := 0
		for _, e := range p.Cuts(data) {
			if _, ok := orig[sha256.Sum256(data[prev:e])]; ok {
				shared += e - prev
			}
			total += e - prev
			prev = e
		}
		// One edit: the chunks around it change, at most two of the
		// largest size; every other chunk is the original's.
		t.Logf("%s: %d of its %d bytes in chunks of the original", name, shared, total)
		if total-shared > 2*p.Max {
			t.Errorf("%s: %d of its bytes in new chunks, more than two chunks' worth (%d)", name, total-shared, 2*p.Max)
		}
	}
}

// TestCutStreams: a cut made from a window of at least Max bytes is the
// cut of the whole data, so a stream cut through a buffer cuts as the
// whole file does.
func TestCutStreams(t *testing.T) {
	p := ForAverage(16 << 10)
	data := randBytes(8<<20, 5)
	want := p.Cuts(data)
	var got []int
	for off := 0; off < len(data); {
		off += p.Cut(data[off:min(len(data), off+p.Max)])
		got = append(got, off)
	}
	if len(got) != len(want) {
		t.Fatalf("windowed cuts: %d chunks, whole: %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("chunk %d ends at %d windowed, %d whole", i, got[i], want[i])
		}
	}
}

func BenchmarkCut(b *testing.B) {
	p := ForAverage(64 << 10)
	data := randBytes(64<<20, 6)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		for off := 0; off < len(data); {
			off += p.Cut(data[off:])
		}
	}
}
