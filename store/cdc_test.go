package store_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/safetensors/safetensorstest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestShiftedCopiesDedup: the same bytes with 1 to 4096 bytes inserted at
// their front store within 1.1× of one copy (issue 29), where chunks cut
// every C bytes from offset 0 share nothing once one byte moves them.
func TestShiftedCopiesDedup(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fixed=%v", fixed), func(t *testing.T) {
			s := storetest.New(t, storetest.Options{Store: store.Options{FixedChunks: fixed}})
			base := randBytes(16<<20, 29)
			var logical int64
			for i, ins := range []int{0, 1, 7, 100, 4096} {
				b := append(randBytes(ins, uint64(100+i)), base...)
				put(t, s, fmt.Sprintf("copy-%d", i), b)
				logical += int64(len(b))
				if !bytes.Equal(get(t, s, fmt.Sprintf("copy-%d", i)), b) {
					t.Fatalf("copy %d reads back wrong", i)
				}
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(st.StoredBytes) / float64(len(base))
			t.Logf("5 copies, %d bytes: stored %.3f× one copy, %d chunks", logical, ratio, st.Chunks)
			if fixed && ratio < 4 {
				t.Fatalf("fixed chunks stored %.2f× one copy: the test's copies are not shifted", ratio)
			}
			if !fixed && ratio > 1.1 {
				t.Fatalf("stored %.3f× one copy, want at most 1.1×", ratio)
			}
		})
	}
}

// TestPagePerFileDedup: a page-per-file tier (LMCache's local disk,
// SGLang's HiCache file backend) stores each distinct page once.
func TestPagePerFileDedup(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	const page = 300 << 10 // not a multiple of anything
	for i := range 64 {
		put(t, s, fmt.Sprintf("lmcache/%03d.kvcache", i), randBytes(page, uint64(i%16)))
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.StoredBytes != 16*page {
		t.Fatalf("stored %d bytes of 16 distinct %d-byte pages", st.StoredBytes, page)
	}
}

// TestCommitChangesByExtent: changes to a file cut by its content (no
// grid of cells) are committed by cutting again only the chunks they
// touch: writes at unaligned offsets, across chunks, a truncation into a
// chunk, an extension past the end and a hole; each commit reads back
// exact, hashes a few chunks rather than the file, and the store checks
// clean (at cleanup, with the previous version open meanwhile).
func TestCommitChangesByExtent(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc})
	r := rand.New(rand.NewPCG(29, 3))
	model := randBytes(300*cc+1234, 4)
	put(t, s, "f", model)
	fi, err := s.Stat("f")
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Ino
	for step := range 40 {
		old, err := s.Open("f")
		if err != nil {
			t.Fatal(err)
		}
		prev := bytes.Clone(model)
		keep := int64(len(model))
		cells := map[int64]bool{}
		mark := func(a, b int64) {
			for c := a / cc; c*cc < b; c++ {
				cells[c] = true
			}
		}
		switch step % 5 {
		case 0, 1: // writes inside the file
			for range 1 + r.IntN(3) {
				off := r.Int64N(int64(len(model)) - 1)
				n := min(1+r.Int64N(3*cc), int64(len(model))-off)
				copy(model[off:off+n], randBytes(int(n), r.Uint64()))
				mark(off, off+n)
			}
		case 2: // a truncation into a chunk: the cut cell is dirty
			keep = int64(len(model)) - 1 - r.Int64N(5*cc)
			model = model[:keep]
			if keep%cc != 0 {
				mark(keep/cc*cc, keep)
			}
		case 3: // an append past the end
			n := 1 + r.Int64N(4*cc)
			mark(int64(len(model)), int64(len(model))+n)
			model = append(model, randBytes(int(n), r.Uint64())...)
		case 4: // a hole past the end, then a write
			hole := cc + r.Int64N(8*cc)
			n := 1 + r.Int64N(cc)
			start := int64(len(model))
			model = append(model, make([]byte, hole)...)
			model = append(model, randBytes(int(n), r.Uint64())...)
			mark(start, start+1) // the cell the old end is in, written as zeros
			mark(start+hole, start+hole+n)
		}
		var idx []int64
		for c := range cells {
			if c*cc < int64(len(model)) {
				idx = append(idx, c)
			}
		}
		sortInts(idx)
		sp := changeSpool(t, s, model, idx)
		size := int64(len(model))
		nfi, st, err := s.CommitChanges(ctx, ino, store.Changes{Size: size, Keep: min(keep, size), Dirty: dirty(idx...), Spool: sp},
			bytes.NewReader(model), store.CommitOptions{Adopt: true})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		ino = nfi.Ino // each version is an inode of its own
		if got := get(t, s, "f"); !bytes.Equal(got, model) {
			t.Fatalf("step %d: content differs", step)
		}
		// The changed cells and the chunks around them (at most C each
		// side of every dirty run), never the file.
		if limit := int64(len(idx))*3*cc + 2*cc; !st.Changes || st.HashedBytes > limit || st.Adopted {
			t.Fatalf("step %d: stats %+v: want changes, at most %d bytes hashed, not adopted", step, st, limit)
		}
		got := make([]byte, len(prev))
		if n, _ := old.ReadAt(got, 0); !bytes.Equal(got[:n], prev[:n]) || n != len(prev) {
			t.Fatalf("step %d: the open previous version changed", step)
		}
		old.Close()
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

func sortInts(a []int64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestHolesStoredAsZeroRuns: a file of no parsed format with long runs of
// zeros (a sparse source's holes) stores them as zero runs, not as a
// zero chunk per chunk, and reads back exact.
func TestHolesStoredAsZeroRuns(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	b := randBytes(40<<20, 9)
	clear(b[3<<20+123 : 35<<20]) // 32 MiB of zeros, not page-aligned at its start
	st := put(t, s, "sparse.bin", b)
	if st.ZeroBytes < 31<<20 || st.Chunks > 400 {
		t.Fatalf("stats %+v: want the zeros as zero runs", st)
	}
	if !bytes.Equal(get(t, s, "sparse.bin"), b) {
		t.Fatal("reads back wrong")
	}
}

// TestLongRowsSplit: a row longer than a batch (a safetensors tensor of
// one row; a llama.cpp layer's K block of a long conversation) is read a
// batch at a time, reads back exact, and a file continuing it still
// reuses its chunks.
func TestLongRowsSplit(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	spec := llamastatetest.Spec{Layers: 1, KRow: 8192, FlashAttn: true}
	toks := make([]uint32, 3000)
	for i := range toks {
		toks[i] = uint32(i * 31)
	}
	a := llamastatetest.Write(spec, toks[:2500]) // K and V blocks of 20 MiB
	b := llamastatetest.Write(spec, toks)
	put(t, s, "a.state", a)
	st := put(t, s, "b.state", b)
	if st.Parent == 0 || st.NewBytes > int64(2*500*8192+(1<<20)) {
		t.Fatalf("stats %+v: want the 2500 tokens' rows reused", st)
	}
	for name, want := range map[string][]byte{"a.state": a, "b.state": b} {
		if !bytes.Equal(get(t, s, name), want) {
			t.Fatalf("%s reads back wrong", name)
		}
	}
	one := safetensorstest.PromptCache(safetensorstest.Spec{Layers: 1, Heads: 1, HeadDim: 8192}, toks[:2000]) // rows of 32 MiB
	put(t, s, "one.safetensors", one)
	if !bytes.Equal(get(t, s, "one.safetensors"), one) {
		t.Fatal("one.safetensors reads back wrong")
	}
}
