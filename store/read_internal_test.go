package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
)

// TestSegmentsHoldPacks: a file whose chunks lie in more packs than the
// store keeps descriptors open for. Its Segments hold every pack they name
// open (beyond the cap) and read the file's bytes through them; released,
// the store falls back to its cap. Concurrent ReadAt calls (run with
// -race) read right and leave no more than the cap open.
func TestSegmentsHoldPacks(t *testing.T) {
	const maxOpen = 2
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	// Small packs: every three chunks start a new one.
	s, err := Open(dir, Options{MaxOpenPacks: maxOpen, PackBytes: 3 * 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	want := map[string][]byte{}
	var base []byte
	for i := 0; i < 6; i++ {
		b := make([]byte, 10*4096+r.IntN(4096))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		if base != nil {
			copy(b, base[:4*4096]) // shared chunks: this file spans older packs too
		}
		base = b
		name := fmt.Sprint("f", i)
		if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, PutOptions{}); err != nil {
			t.Fatal(err)
		}
		want[name] = b
	}
	f, err := s.Open("f5")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	segs, ok := f.Segments(100, int(f.Size()))
	if !ok {
		t.Fatal("no segments")
	}
	var got []byte
	fds := map[uintptr]bool{}
	for _, sg := range segs.List {
		if sg.Fd == nil {
			got = append(got, make([]byte, sg.Len)...)
			continue
		}
		fds[sg.Fd.Fd()] = true
		p := make([]byte, sg.Len)
		if _, err := sg.Fd.ReadAt(p, sg.Off); err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, want["f5"][100:]) {
		t.Fatal("segments do not read the file's bytes")
	}
	if len(fds) <= maxOpen {
		t.Fatalf("the file spans %d packs; the test needs more than %d", len(fds), maxOpen)
	}
	if n := s.packs.OpenFiles(); n < len(fds) {
		t.Fatalf("%d pack descriptors open while segments hold %d", n, len(fds))
	}
	// Reading other files meanwhile closes none of the held ones.
	for name, b := range want {
		g, err := s.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, len(b))
		if _, err := g.ReadAt(p, 0); err != nil || !bytes.Equal(p, b) {
			t.Fatalf("%s: %v", name, err)
		}
		g.Close()
	}
	for _, sg := range segs.List {
		if sg.Fd != nil {
			if _, err := sg.Fd.ReadAt(make([]byte, 1), sg.Off); err != nil {
				t.Fatalf("held descriptor closed under the reader: %v", err)
			}
		}
	}
	segs.Release()
	segs.Release() // twice is harmless
	if n := s.packs.OpenFiles(); n > maxOpen {
		t.Fatalf("%d pack descriptors open after release, cap %d", n, maxOpen)
	}

	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := 0; k < 30; k++ {
				name := fmt.Sprint("f", (w+k)%6)
				g, err := s.Open(name)
				if err != nil {
					t.Error(err)
					return
				}
				b := want[name]
				off := (w * 997 * (k + 1)) % len(b)
				p := make([]byte, len(b)-off)
				_, err = g.ReadAt(p, int64(off))
				if sg, ok := g.Segments(int64(off), len(p)); ok {
					sg.Release()
				}
				g.Close()
				if err != nil || !bytes.Equal(p, b[off:]) {
					t.Errorf("%s at %d: %v", name, off, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if n := s.packs.OpenFiles(); n > maxOpen {
		t.Fatalf("%d pack descriptors open after concurrent reads, cap %d", n, maxOpen)
	}
	f.SetVerify(true)
	if _, ok := f.Segments(0, 10); ok {
		t.Fatal("segments of a verifying file: its bytes must go through ReadAt")
	}
}
