package store_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestReadAtRuns: ReadAt reads chunks that lie one after the other in a
// pack with one read, and must still give exactly the file's bytes
// wherever a read starts and ends: inside a chunk, across the end of a
// pack (the run stops there), across chunks shared with an earlier file
// (in another pack, or in the same one but elsewhere), across zero runs,
// and at the end of the file. Every read at random unaligned offsets and
// lengths is compared with the bytes put.
func TestReadAtRuns(t *testing.T) {
	const C = 16 << 10
	s := storetest.New(t, storetest.Options{ChunkSize: C, Store: store.Options{PackBytes: 256 << 10}})
	other := randBytes(12*C, 91)
	put(t, s, "other", other)
	b := randBytes(70*C+1234, 92)
	for i := 5; i < 9; i++ { // chunks of "other": another pack's
		copy(b[i*C:(i+1)*C], other[(i-3)*C:(i-2)*C])
	}
	clear(b[20*C : 23*C])      // a zero run
	for i := 30; i < 34; i++ { // "other"'s chunks in another order
		copy(b[i*C:(i+1)*C], other[(40-i)*C:(41-i)*C])
	}
	copy(b[50*C:51*C], b[10*C:11*C]) // this file's own chunk, again
	put(t, s, "f", b)
	f, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(5, 6))
	got := make([]byte, len(b))
	for k := 0; k < 2000; k++ {
		off := r.IntN(len(b))
		n := 1 + r.IntN(min(len(b)-off, 20*C))
		if k%4 == 0 {
			n = len(b) - off // to the end
		}
		m, err := f.ReadAt(got[:n], int64(off))
		if m != n || err != nil {
			t.Fatalf("ReadAt(%d, %d): %d, %v", n, off, m, err)
		}
		if !bytes.Equal(got[:n], b[off:off+n]) {
			for i := range n {
				if got[i] != b[off+i] {
					t.Fatalf("ReadAt(%d, %d): byte %d of the file reads %#x, want %#x", n, off, off+i, got[i], b[off+i])
				}
			}
		}
	}
	if m, err := f.ReadAt(got, 0); m != len(b) || err != nil || !bytes.Equal(got, b) {
		t.Fatalf("whole read: %d, %v", m, err)
	}
}
