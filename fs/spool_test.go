package fs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestSpoolModel: random writes (many of them runs of whole cells in
// order, the pattern hashed while writing) and truncations of a spool over
// a committed version, against a model. After every operation the spool
// reads as the model, and every cell it says is hashed (once the hashes
// queued are done) has the sha256 of its bytes; every few operations the changes are committed
// (store.CommitChanges) and the new version reads as the model, and the
// next spool starts over it. The store's invariants are checked at the end.
// It runs with spool files, with spools in memory (memspool.go) that never
// spill, with a bound inside the model's sizes (spools start in memory
// over a small enough version and spill, mid-file, at a random write or
// truncation), and with a daemon-wide budget smaller than one spool
// (growth spills); after each spool every buffer is given back.
func TestSpoolModel(t *testing.T) {
	const C = 4096
	modes := []struct {
		name string
		mem  func() *memBudget
	}{
		{"file", func() *memBudget { return nil }},
		{"memory", func() *memBudget { return newMemBudget(1<<20, 8<<20) }},
		{"memory spilling", func() *memBudget { return newMemBudget(41*C+C/3, 8<<20) }},
		{"memory over budget", func() *memBudget { return newMemBudget(1<<20, 20*C+7) }},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) { spoolModel(t, C, mode.mem()) })
	}
}

func spoolModel(t *testing.T, C int64, mem *memBudget) {
	spilled, inMem := 0, 0
	for seed := uint64(1); seed <= 4; seed++ {
		s := storetest.New(t, storetest.Options{ChunkSize: C})
		r := rand.New(rand.NewPCG(seed, 1))
		rnd := func(n int64) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32()) | 1 // never zero: a lost byte shows
			}
			return b
		}
		model := rnd(40*C + 123)
		ctx := context.Background()
		fi, _, err := s.Put(ctx, bytes.NewReader(model), int64(len(model)), "f", store.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ino := fi.Ino
		var sp *spool
		start := func() {
			base, err := s.OpenIno(ino)
			if err != nil {
				t.Fatal(err)
			}
			if sp, err = newSpool(filepath.Join(s.Dir(), "spool"), base, C, false, mem); err != nil {
				t.Fatal(err)
			}
			if sp.inMem() {
				inMem++
			}
		}
		// done ends a spool: one that started in memory may have
		// spilled; its buffer is given back.
		done := func() {
			if sp.budget != nil && !sp.inMem() {
				spilled++
			}
			sp.close(true)
			if mem != nil && mem.used.Load() != 0 {
				t.Fatalf("seed %d: %d bytes of spools in memory still counted after the spool closed", seed, mem.used.Load())
			}
			if sp.inMem() && sp.mem != nil {
				t.Fatal("a closed spool kept its buffer")
			}
		}
		start()
		summed := 0
		for op := 0; op < 300; op++ {
			size := int64(len(model))
			switch p := r.IntN(10); {
			case p < 4: // a run of whole cells in order, in pieces
				off := r.Int64N(60) * C
				end := off + (1+r.Int64N(4))*C
				for off < end {
					n := min(end-off, 1+r.Int64N(3*C))
					b := rnd(n)
					if _, err := sp.write(b, off); err != nil {
						t.Fatal(err)
					}
					model = writeModel(model, b, off)
					off += n
				}
			case p < 8:
				off, b := r.Int64N(64*C), rnd(1+r.Int64N(2*C))
				if _, err := sp.write(b, off); err != nil {
					t.Fatal(err)
				}
				model = writeModel(model, b, off)
			default:
				sz := r.Int64N(64 * C)
				if err := sp.truncate(sz); err != nil {
					t.Fatal(err)
				}
				if sz < size {
					model = model[:sz]
				} else {
					model = append(model, make([]byte, sz-size)...)
				}
			}
			if mem != nil && sp.inMem() && (int64(len(sp.mem)) > sp.size || mem.used.Load() > mem.max || sp.size > mem.each) {
				t.Fatalf("seed %d op %d: a spool in memory holds %d bytes of a %d-byte file (%d counted, bounds %d, %d)",
					seed, op, len(sp.mem), sp.size, mem.used.Load(), mem.each, mem.max)
			}
			got := make([]byte, len(model)+10)
			n, _ := sp.ReadAt(got, 0)
			if n != len(model) || !bytes.Equal(got[:n], model) {
				t.Fatalf("seed %d op %d: the spool reads %d bytes, not the model's %d (or other bytes)", seed, op, n, len(model))
			}
			sp.hashing.Wait()
			for i, c := range sp.cells {
				if c.summed {
					summed++
					if a := i * C; a+C > int64(len(model)) || c.sum != blockstore.Sum(model[a:a+C]) {
						t.Fatalf("seed %d op %d: cell %d's sum is not the sha256 of its bytes", seed, op, i)
					}
				}
			}
			if op%25 == 24 {
				opts := store.CommitOptions{Adopt: true}
				if op%50 == 49 {
					opts.Close = []*store.File{sp.base} // the pin moves to the commit
				}
				nfi, _, err := s.CommitChanges(ctx, ino, sp.changes(), sp, opts)
				if err != nil {
					t.Fatalf("seed %d op %d: %v", seed, op, err)
				}
				done() // an adopted spool file is gone already
				ino = nfi.Ino
				f, err := s.OpenIno(ino)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, f.Size())
				f.ReadAt(got, 0)
				f.Close()
				if !bytes.Equal(got, model) {
					t.Fatalf("seed %d op %d: the commit reads back %d bytes, not the model's %d (or other bytes)", seed, op, len(got), len(model))
				}
				start()
			}
		}
		done()
		if summed == 0 {
			t.Fatalf("seed %d: no cell was hashed while written", seed)
		}
	}
	switch {
	case mem == nil && inMem > 0:
		t.Fatal("a spool without a budget was held in memory")
	case mem != nil && inMem == 0:
		t.Fatal("no spool was held in memory")
	case mem != nil && mem.each < 64*C && spilled == 0:
		t.Fatal("no spool spilled past its bound")
	case mem != nil && mem.max < 64*C && spilled == 0:
		t.Fatal("no spool spilled past the daemon's budget")
	case mem != nil && mem.each >= 64*C && mem.max >= 64*C && spilled > 0:
		t.Fatalf("%d spools spilled within their bounds", spilled)
	}
}

// writeModel writes b at off into model, growing it as a file grows.
func writeModel(model, b []byte, off int64) []byte {
	if end := off + int64(len(b)); end > int64(len(model)) {
		model = append(model, make([]byte, end-int64(len(model)))...)
	}
	copy(model[off:], b)
	return model
}

// TestSpoolStaleHash: a hash computed for a cell that a write changed
// after it was queued is dropped, not kept as the cell's sum.
func TestSpoolStaleHash(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	if _, err := sp.write(bytes.Repeat([]byte{1}, C), 0); err != nil {
		t.Fatal(err)
	}
	sp.hashing.Wait()
	c := sp.cells[0]
	if !c.summed || c.sum != blockstore.Sum(bytes.Repeat([]byte{1}, C)) {
		t.Fatal("a cell written whole was not hashed")
	}
	stale := hashJob{c: c, gen: c.gen, off: 0}
	if _, err := sp.write([]byte{2}, 10); err != nil { // does not reach the cell's end
		t.Fatal(err)
	}
	if c.summed {
		t.Fatal("a write kept the cell's old sum")
	}
	sp.hashCell(stale, make([]byte, C)) // finishes after the write
	if c.summed {
		t.Fatal("a hash queued before a write was kept after it")
	}
}

// TestSpoolWholeSum: a new blob's spool hashes its whole content as it is
// written (trackWhole), and the sum its changes give the commit is the
// sha256 of the content, whatever came after the cells it hashed in
// order: rewrites of a hashed cell with other bytes or the same ones,
// truncations below or inside the hashed cells, growth, writes out of
// order, and writes racing the hasher. Written in order from 0 in pieces
// of any size, the sum is given with only the last, short cell read back.
// It runs with a spool file, in memory, and spilling from memory.
func TestSpoolWholeSum(t *testing.T) {
	const C = 4096
	modes := []struct {
		name string
		mem  func() *memBudget
	}{
		{"file", func() *memBudget { return nil }},
		{"memory", func() *memBudget { return newMemBudget(1<<20, 8<<20) }},
		{"memory spilling", func() *memBudget { return newMemBudget(13*C+C/3, 8<<20) }},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := storetest.New(t, storetest.Options{ChunkSize: C})
			given, inOrder := 0, 0
			for seed := uint64(1); seed <= 200; seed++ {
				r := rand.New(rand.NewPCG(seed, 2))
				rnd := func(n int64) []byte {
					b := make([]byte, n)
					for i := range b {
						b[i] = byte(r.Uint32()) | 1
					}
					return b
				}
				sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, mode.mem())
				if err != nil {
					t.Fatal(err)
				}
				sp.trackWhole()
				var model []byte
				write := func(b []byte, off int64) {
					t.Helper()
					if _, err := sp.write(b, off); err != nil {
						t.Fatal(err)
					}
					model = writeModel(model, b, off)
				}
				// In order from 0, in pieces of any size.
				total := r.Int64N(20 * C)
				for off := int64(0); off < total; {
					n := min(total-off, 1+r.Int64N(3*C))
					write(rnd(n), off)
					off += n
				}
				ordered := seed%4 == 0 // then nothing else
				if ordered {
					sp.hashing.Wait()
				}
				for op := 0; !ordered && op < r.IntN(4); op++ {
					if r.IntN(3) == 0 {
						sp.hashing.Wait() // the change comes after the hash
					}
					switch p := r.IntN(5); {
					case p == 0 && len(model) > 0: // other bytes
						off := r.Int64N(int64(len(model)))
						write(rnd(1+r.Int64N(C)), off)
					case p == 1 && len(model) > 0: // the same bytes
						off := r.Int64N(int64(len(model)))
						n := min(int64(len(model))-off, 1+r.Int64N(2*C))
						write(append([]byte{}, model[off:off+n]...), off)
					case p == 2: // shorter or longer
						sz := r.Int64N(24 * C)
						if err := sp.truncate(sz); err != nil {
							t.Fatal(err)
						}
						if sz < int64(len(model)) {
							model = model[:sz]
						} else {
							model = append(model, make([]byte, sz-int64(len(model)))...)
						}
					default: // appended, whole cells at a time
						n := (1 + r.Int64N(3)) * C
						write(rnd(n), int64(len(model)))
					}
				}
				ch := sp.changes()
				if ch.BlobSummed {
					given++
					if ch.BlobSum != blockstore.Sum(model) {
						t.Fatalf("seed %d: whole sum %s, content's %s (%d bytes)", seed, ch.BlobSum.Short(), blockstore.Sum(model).Short(), len(model))
					}
				}
				if ordered {
					if !ch.BlobSummed {
						t.Fatalf("seed %d: a blob written in order got no whole sum", seed)
					}
					want := int64(len(model)) / C
					if want == 1 {
						want = 0 // the first cell waits for the second
					}
					if got := int64(len(sp.wholeCells)); got != want {
						t.Fatalf("seed %d: %d cells hashed in order, want %d", seed, got, want)
					}
					inOrder++
				}
				sp.close(true)
			}
			if given <= inOrder {
				t.Fatalf("a whole sum given for %d blobs, %d of them written only in order: none after a change", given, inOrder)
			}
		})
	}
}

// TestSpoolWholeSumStale: a cell hashed into the whole sum and then
// changed, before or after the whole hasher took it, leaves the commit
// with the sum of the new content, hashed again from the start, never
// with the old content's.
func TestSpoolWholeSumStale(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.trackWhole()
	a := bytes.Repeat([]byte{1}, 2*C)
	if _, err := sp.write(a, 0); err != nil {
		t.Fatal(err)
	}
	sp.hashing.Wait()
	if len(sp.wholeCells) != 2 {
		t.Fatalf("%d cells in the whole sum, want 2", len(sp.wholeCells))
	}
	// A job for cell 0 queued before a change, taken after it: the cell
	// is the next one again once the whole hash restarts.
	stale := sp.wholeCells[0]
	if _, err := sp.write([]byte{2}, 5); err != nil {
		t.Fatal(err)
	}
	b := append([]byte{}, a...)
	b[5] = 2
	if ch := sp.changes(); !ch.BlobSummed || ch.BlobSum != blockstore.Sum(b) {
		t.Fatalf("after a hashed cell changed: whole sum given %v, %s; want %s", ch.BlobSummed, ch.BlobSum.Short(), blockstore.Sum(b).Short())
	}
	if len(sp.wholeCells) != 0 {
		t.Fatalf("the whole hash kept %d cells hashed before a change", len(sp.wholeCells))
	}
	sp.hashWhole(stale, make([]byte, C))
	if len(sp.wholeCells) != 0 {
		t.Fatal("a cell queued before a change was added to the whole hash after it")
	}
	if ch := sp.changes(); !ch.BlobSummed || ch.BlobSum != blockstore.Sum(b) {
		t.Fatalf("whole sum given %v, %s; want %s", ch.BlobSummed, ch.BlobSum.Short(), blockstore.Sum(b).Short())
	}
	// Cell 1 cut off and made again, with other bytes: another cell, of
	// the same generation as the one hashed.
	sp2, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.close(true)
	sp2.trackWhole()
	if _, err := sp2.write(a, 0); err != nil {
		t.Fatal(err)
	}
	sp2.hashing.Wait()
	gen := sp2.cells[1].gen
	if err := sp2.truncate(C); err != nil {
		t.Fatal(err)
	}
	other := bytes.Repeat([]byte{3}, C)
	if _, err := sp2.write(other, C); err != nil {
		t.Fatal(err)
	}
	if sp2.cells[1].gen != gen {
		t.Fatalf("the cell made again has generation %d, the one hashed %d: the case is not tested", sp2.cells[1].gen, gen)
	}
	want := blockstore.Sum(append(append([]byte{}, a[:C]...), other...))
	if ch := sp2.changes(); !ch.BlobSummed || ch.BlobSum != want {
		t.Fatalf("after a cut and a rewrite: whole sum given %v, %s; want %s", ch.BlobSummed, ch.BlobSum.Short(), want.Short())
	}
}

// TestSpoolPieces: a new snapshot's spool, written in order from 0 in
// pieces of any size, hashes the chunks of the store's plan as they are
// written, and its commit hashes nothing (spool file and in memory); every
// sum is of the bytes at its place. A rewrite of written bytes, a write
// elsewhere, a truncation or a file that is no snapshot leave the commit
// no sums, and it hashes the file as before.
func TestSpoolPieces(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: store.DefaultChunkSize})
	C := s.ChunkSize()
	snap := func(m snapgen.Model, tokens int) []byte {
		path := filepath.Join(t.TempDir(), "s.mlxkv")
		if err := m.WriteFile(path, snapgen.Tokens(tokens, uint64(tokens))); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big, small := snap(snapgen.Llama3_8B, 300), snap(snapgen.Tiny, 200)
	cases := []struct {
		name   string
		b      []byte
		mem    bool
		after  func(sp *spool, b []byte) []byte // before the commit: the new content
		summed bool
		// headerLast writes the tensors first and the header last, as
		// the engine's writer does (mlx.Writer); head is how many
		// writes the header takes.
		headerLast bool
		head       int
	}{
		{"in order", big, false, nil, true, false, 0},
		{"header last", big, false, nil, true, true, 1},
		{"header last, in three writes", big, false, nil, true, true, 3},
		{"header last, then written again", bytes.Clone(big), false, func(sp *spool, b []byte) []byte {
			sp.write(b[:100], 0)
			return b
		}, false, true, 1},
		{"in order, in memory", small, true, nil, true, false, 0},
		// Other bytes, in the spool and in the content it must read as.
		{"a rewrite", bytes.Clone(big), false, func(sp *spool, b []byte) []byte {
			copy(b[100_000:], bytes.Repeat([]byte{7}, 500))
			sp.write(b[100_000:100_500], 100_000)
			return b
		}, false, false, 0},
		{"truncated and regrown", bytes.Clone(big), false, func(sp *spool, b []byte) []byte {
			sp.truncate(int64(len(b)) - 70_000)
			copy(b[len(b)-70_000:], bytes.Repeat([]byte{9}, 70_000))
			sp.write(b[len(b)-70_000:], int64(len(b))-70_000)
			return b
		}, false, false, 0},
		// The write goes on where the writes were, past the zeros the
		// truncation left: in order, but not all of it written so.
		{"truncated, then written on", bytes.Clone(big), false, func(sp *spool, b []byte) []byte {
			end := int64(len(b))
			sp.truncate(end - 200_000)
			clear(b[end-200_000:])
			sp.write([]byte("more"), end)
			return append(b, "more"...)
		}, false, false, 0},
		{"not a snapshot", bytes.Repeat([]byte("not a snapshot "), 100_000), false, nil, false, false, 0},
	}
	for k, c := range cases {
		var mem *memBudget
		if c.mem {
			mem = newMemBudget(1<<20, 8<<20)
		}
		sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, mem)
		if err != nil {
			t.Fatal(err)
		}
		if sp.inMem() != c.mem {
			t.Fatalf("%s: spool in memory %v", c.name, sp.inMem())
		}
		sp.trackPieces(s.SnapshotPieces, nil)
		r := rand.New(rand.NewPCG(uint64(k), 5))
		from := 0
		if c.headerLast {
			var p mlx.Prefix
			if err := p.UnmarshalBinary(c.b[:mlx.PrefixLen]); err != nil {
				t.Fatal(err)
			}
			from = int(p.DataStart)
		}
		for off := from; off < len(c.b); {
			n := min(len(c.b)-off, 1+r.IntN(200_000))
			if _, err := sp.write(c.b[off:off+n], int64(off)); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		for i, off := 0, 0; i < c.head; i++ {
			n := from - off
			if i < c.head-1 {
				n = from / c.head
			}
			if _, err := sp.write(c.b[off:off+n], int64(off)); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		if c.after != nil {
			c.b = c.after(sp, c.b)
		}
		sp.modified()
		ch := sp.changes()
		var covered int64
		for _, pc := range ch.Pieces {
			if !pc.Summed || pc.Sum != blockstore.Sum(c.b[pc.Off:pc.Off+pc.N]) {
				t.Fatalf("%s: piece [%d,+%d): its sum is not of its bytes", c.name, pc.Off, pc.N)
			}
			covered += pc.N
		}
		if c.summed != (covered > int64(len(c.b))/2) || !c.summed && len(ch.Pieces) > 0 {
			t.Fatalf("%s: %d pieces summed, covering %d of %d bytes", c.name, len(ch.Pieces), covered, len(c.b))
		}
		// The cells are hashed only where the pieces do not stand in
		// for them (piecesCover): a snapshot written in order hashes
		// each byte once.
		cells := 0
		for _, cl := range sp.cells {
			if cl.summed {
				cells++
			}
		}
		if c.after == nil && c.summed && cells != 0 {
			t.Fatalf("%s: %d of %d cells hashed besides the pieces", c.name, cells, len(sp.cells))
		}
		if !c.summed && c.after == nil && cells < len(sp.cells)/2 {
			t.Fatalf("%s: %d of %d cells hashed, and no pieces", c.name, cells, len(sp.cells))
		}
		fi, err := s.CreateAt(1, fmt.Sprintf("s%d.mlxkv", k), 0o644, store.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := s.CommitChanges(context.Background(), fi.Ino, ch, sp, store.CommitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.summed && st.HashedBytes != 0 || !c.summed && st.HashedBytes == 0 {
			t.Fatalf("%s: the commit hashed %d bytes", c.name, st.HashedBytes)
		}
		sp.close(true)
		f, err := s.Open(fmt.Sprintf("s%d.mlxkv", k))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, f.Size())
		f.ReadAt(got, 0)
		f.Close()
		if !bytes.Equal(got, c.b) {
			t.Fatalf("%s: reads back wrong", c.name)
		}
	}
	if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestSpoolWholeSumOneCell: a blob of one cell (the engine's 64 KiB
// blocks) is named by its cell's sum, which its hasher computed: the whole
// hash never runs. Changed after it was hashed, its sum is of the new
// bytes.
func TestSpoolWholeSumOneCell(t *testing.T) {
	const C = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	sp.trackWhole()
	a := bytes.Repeat([]byte{4}, C)
	if _, err := sp.write(a, 0); err != nil {
		t.Fatal(err)
	}
	if ch := sp.changes(); !ch.BlobSummed || ch.BlobSum != blockstore.Sum(a) || sp.wholeq != nil {
		t.Fatalf("one cell: whole sum given %v, %s, whole hasher started %v; want %s and none",
			ch.BlobSummed, ch.BlobSum.Short(), sp.wholeq != nil, blockstore.Sum(a).Short())
	}
	a[100] = 5
	if _, err := sp.write(a[100:101], 100); err != nil {
		t.Fatal(err)
	}
	if ch := sp.changes(); !ch.BlobSummed || ch.BlobSum != blockstore.Sum(a) {
		t.Fatalf("one cell changed: whole sum %s, want %s", ch.BlobSum.Short(), blockstore.Sum(a).Short())
	}
}
