package store

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// TestOpenLooksUpChunksOnRead: opening a file looks up none of its chunks;
// a read looks up the chunks it covers and no others (the engine's scan
// reads the first few KiB of every snapshot: it must not pay for the
// whole file's chunk records at each open). Reads of the rest, and
// Segments, then find every chunk and read the file's bytes. Before the
// lookups moved to the reads, an open looked up every chunk of the file.
func TestOpenLooksUpChunksOnRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{FixedChunks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := make([]byte, 64*4096+100)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), "f", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := s.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known := func() (n int) {
		for i := range f.exts {
			if f.exts[i].known.Load() {
				n++
			}
		}
		return n
	}
	if len(f.exts) != 65 {
		t.Fatalf("%d extents, want 65 chunks", len(f.exts))
	}
	if n := known(); n != 0 {
		t.Fatalf("open looked up %d chunks, want none", n)
	}
	head := make([]byte, 26)
	if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, b[:26]) {
		t.Fatalf("read the first 26 bytes: %v", err)
	}
	if n := known(); n != 1 {
		t.Fatalf("a read of 26 bytes looked up %d chunks, want 1", n)
	}
	// Two chunks, across a boundary.
	mid := make([]byte, 200)
	if _, err := f.ReadAt(mid, 10*4096-100); err != nil || !bytes.Equal(mid, b[10*4096-100:10*4096+100]) {
		t.Fatalf("read across chunks 9 and 10: %v", err)
	}
	if n := known(); n != 3 {
		t.Fatalf("after a read of two more chunks, %d looked up, want 3", n)
	}
	segs, ok := f.Segments(0, len(b))
	if !ok {
		t.Fatal("no segments")
	}
	var got []byte
	for _, sg := range segs.List {
		p := make([]byte, sg.Len)
		if _, err := sg.Fd.ReadAt(p, sg.Off); err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	segs.Release()
	if !bytes.Equal(got, b) {
		t.Fatal("the segments of the whole file hold other bytes")
	}
	if n := known(); n != 65 {
		t.Fatalf("after segments of the whole file, %d chunks looked up, want 65", n)
	}
	all := make([]byte, len(b))
	if _, err := f.ReadAt(all, 0); err != nil || !bytes.Equal(all, b) {
		t.Fatalf("read the whole file: %v", err)
	}
}
