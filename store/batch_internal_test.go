package store

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/blockstore"
)

// TestMixedMappedBatches: a source file whose batches are mapped only
// some of the time (a mapping can fail: an address-space limit, too many
// mappings) alternates read buffers with mappings. Each batch must hold
// exactly one token of the free list: a mapped batch that also gave its
// unused buffer back early overfilled the list, and the ingest blocked for
// good on its last give-back.
func TestMixedMappedBatches(t *testing.T) {
	s, _ := newTestStore(t)
	const n = 9*batchBytes + 12345 // ten batches
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	p := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	var calls, mapped int
	in := &ingest{s: s, src: src, size: n, comps: []string{"mixed"}, states: map[blockstore.ID]*chunkState{}}
	in.mapper = func(src io.ReaderAt, off, n int64) (mapping, bool) {
		calls++
		if calls%2 == 1 { // the first, third, ... batch is read into a buffer
			return mapping{}, false
		}
		mapped++
		return mapSource(src, off, n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := in.run(context.Background())
		in.finish(err)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ingest of a source with mapped and read batches never finished")
	}
	if mapped < 3 {
		t.Fatalf("only %d of %d batches mapped: the test did not mix them", mapped, calls)
	}
	f, err := s.Open("mixed")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, n)
	if _, err := f.ReadAt(got, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b) {
		t.Fatal("mixed reads back wrong")
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
