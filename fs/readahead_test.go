package fs

import (
	"math/rand/v2"
	"testing"
)

// TestReadAheadStreams: reads that continue where one of a handle's recent
// reads ended prefetch the next packAhead bytes of their stream, once per
// half window, for up to maxStreams streams read in turn (a restore's
// threads on one descriptor); reads at random places prefetch nothing; a
// prefetch never covers bytes before the read that caused it or twice.
func TestReadAheadStreams(t *testing.T) {
	const req = requestBytes
	var ra readAhead
	got := map[int64][]int64{} // stream start: prefetch starts
	var stream int64
	prefetch := func(off, n int64) {
		if off < stream {
			t.Fatalf("prefetch at %d, before the stream at %d", off, stream)
		}
		if n <= 0 || n > packAhead {
			t.Fatalf("prefetch of %d bytes", n)
		}
		got[stream] = append(got[stream], off)
	}
	const streams, reads = 16, 64
	for i := int64(0); i < reads; i++ {
		for s := int64(0); s < streams; s++ {
			stream = (s + 1) << 30
			ra.read(stream+i*req, req, prefetch)
		}
	}
	for s := int64(0); s < streams; s++ {
		p := got[(s+1)<<30]
		// 64 MiB read sequentially, kept at least half a window ahead:
		// between one prefetch per window and one per half window.
		if lo, hi := reads*req/packAhead, reads*req/(packAhead/2)+1; len(p) < lo || len(p) > hi {
			t.Errorf("stream %d: %d prefetches, want %d to %d", s, len(p), lo, hi)
		}
		for k := 1; k < len(p); k++ {
			if p[k] <= p[k-1] {
				t.Errorf("stream %d: prefetch at %d after one at %d", s, p[k], p[k-1])
			}
		}
	}

	var random readAhead
	r := rand.New(rand.NewPCG(1, 2))
	n := 0
	for range 1000 {
		random.read(r.Int64N(1<<40)&^(req-1), req, func(off, n2 int64) { n++ })
	}
	if n > 10 {
		t.Errorf("random reads prefetched %d times", n)
	}
}
