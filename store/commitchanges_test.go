package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

const cc = 4096 // the chunk size of these tests' stores

// changeSpool is a sparse spool file holding, of content, only the given
// cells (as the filesystem's spool does), sized to the content.
func changeSpool(t *testing.T, s *store.Store, content []byte, cells []int64) *os.File {
	t.Helper()
	f, err := os.CreateTemp(filepath.Join(s.Dir(), "spool"), "w-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	if err := f.Truncate(int64(len(content))); err != nil {
		t.Fatal(err)
	}
	for _, i := range cells {
		a, b := i*cc, min(i*cc+cc, int64(len(content)))
		if _, err := f.WriteAt(content[a:b], a); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// summedCells describes model as a new file written whole: every cell
// dirty, each full one summed as the writer sums it.
func summedCells(model []byte) ([]int64, []store.DirtyChunk) {
	var cells []int64
	var d []store.DirtyChunk
	for i := int64(0); i*cc < int64(len(model)); i++ {
		cells = append(cells, i)
		dc := store.DirtyChunk{Index: i}
		if (i+1)*cc <= int64(len(model)) {
			dc.Sum, dc.Summed = blockstore.Sum(model[i*cc:(i+1)*cc]), true
		}
		d = append(d, dc)
	}
	return cells, d
}

func dirty(cells ...int64) []store.DirtyChunk {
	var out []store.DirtyChunk
	for _, i := range cells {
		out = append(out, store.DirtyChunk{Index: i})
	}
	return out
}

// TestCommitChangesReusesChunks: a 4000-byte write across two cells of a
// 100-cell file commits by hashing those two cells only; every other chunk
// is reused, the content is exact, and the refcounts stay right (Check at
// cleanup) with the previous version still open and after it is closed. A
// cell whose sum the writer computed is not hashed at all.
func TestCommitChangesReusesChunks(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true}})
	model := randBytes(100*cc, 1)
	put(t, s, "f", model)
	fi, err := s.Stat("f")
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Open("f") // the previous version stays open across the commit
	if err != nil {
		t.Fatal(err)
	}
	copy(model[10*cc+100:], randBytes(4000, 2))
	sp := changeSpool(t, s, model, []int64{10, 11})
	size := int64(len(model))
	nfi, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: size, Keep: size, Dirty: dirty(10, 11), Spool: sp},
		bytes.NewReader(model), store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Changes || st.HashedBytes != 2*cc || st.ReusedBytes != 98*cc || st.NewBytes != 2*cc || st.Adopted {
		t.Fatalf("stats %+v: want changes, 2 cells hashed and stored, 98 reused, not adopted", st)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, model) {
		t.Fatal("content after a commit of changes differs")
	}
	if nfi.ID != fi.ID {
		t.Fatalf("identity %d, was %d", nfi.ID, fi.ID)
	}
	buf := make([]byte, 3*cc)
	if _, err := old.ReadAt(buf, 9*cc); err != nil || !bytes.Equal(buf, randBytes(100*cc, 1)[9*cc:12*cc]) {
		t.Fatalf("the open previous version changed (%v)", err)
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	old.Close()

	// A cell hashed while written: not read again.
	copy(model[20*cc:21*cc], randBytes(cc, 3))
	sp = changeSpool(t, s, model, []int64{20})
	_, st, err = s.CommitChanges(ctx, nfi.Ino, store.Changes{Size: size, Keep: size, Spool: sp,
		Dirty: []store.DirtyChunk{{Index: 20, Sum: blockstore.Sum(model[20*cc : 21*cc]), Summed: true}}},
		bytes.NewReader(model), store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.HashedBytes != 0 || st.NewBytes != cc {
		t.Fatalf("stats %+v: want nothing hashed, one cell stored", st)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, model) {
		t.Fatal("content after a commit of a summed cell differs")
	}
}

// TestCommitChangesTruncateExtend: a truncation into the middle of a cell
// (that cell dirty, holding the kept bytes and zeros) and an extension
// past the old end (zeros, stored as a zero run without reading them).
func TestCommitChangesTruncateExtend(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true}})
	orig := randBytes(64*cc+1000, 4)
	put(t, s, "f", orig)
	fi, _ := s.Stat("f")
	keep := int64(30*cc + 123)
	size := int64(50*cc + 7)
	model := make([]byte, size)
	copy(model, orig[:keep])
	sp := changeSpool(t, s, model, []int64{30})
	nfi, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: size, Keep: keep, Dirty: dirty(30), Spool: sp},
		nil, store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.HashedBytes != cc || st.ReusedBytes != 30*cc || st.ZeroBytes != size-31*cc {
		t.Fatalf("stats %+v", st)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, model) {
		t.Fatal("content after truncate and extend differs")
	}
	// Then a write into the zeros, and one into the short last cell that
	// makes the file longer.
	copy(model[40*cc+5:], []byte("hello"))
	model = append(model, []byte("tail")...)
	size = int64(len(model))
	sp = changeSpool(t, s, model, []int64{40, 50})
	_, st, err = s.CommitChanges(ctx, nfi.Ino, store.Changes{Size: size, Keep: nfi.Size, Dirty: dirty(40, 50), Spool: sp},
		nil, store.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.HashedBytes != cc+11 {
		t.Fatalf("stats %+v: want one cell and the 11-byte last one hashed", st)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, model) {
		t.Fatal("content after writes into zeros differs")
	}
}

// TestCommitChangesRefusesUndirtiedChange: a growing file whose short last
// cell is not dirty would reuse a chunk whose cell changed; the commit
// fails rather than store a manifest off the grid, and so does a cut cell.
func TestCommitChangesRefusesUndirtiedChange(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true}})
	orig := randBytes(10*cc+100, 5)
	put(t, s, "f", orig)
	fi, _ := s.Stat("f")
	model := append(append([]byte{}, orig...), make([]byte, cc)...)
	sp := changeSpool(t, s, model, nil)
	_, _, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: int64(len(model)), Keep: int64(len(orig)), Spool: sp},
		nil, store.CommitOptions{})
	if err == nil || !strings.Contains(err.Error(), "not dirty") {
		t.Fatalf("grown last cell not dirty: %v", err)
	}
	_, _, err = s.CommitChanges(ctx, fi.Ino, store.Changes{Size: 5*cc + 1, Keep: 5*cc + 1, Spool: sp},
		nil, store.CommitOptions{})
	if err == nil || !strings.Contains(err.Error(), "not dirty") {
		t.Fatalf("cut cell not dirty: %v", err)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, orig) {
		t.Fatal("a refused commit changed the file")
	}
}

// TestCommitChangesWholeContent: a blob (in a blocks directory) needs its
// whole content's sha256 and a snapshot its header: both are committed
// from the whole content, the source when something is kept and the
// spool itself when nothing is, and read back exact.
func TestCommitChangesWholeContent(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true, AdoptMinBytes: 1}})
	for k, name := range []string{"blocks/x", "s.mlxkv"} {
		orig := randBytes(20*cc, 6+10*uint64(k))
		put(t, s, name, orig)
		fi, _ := s.Stat(name)
		model := append([]byte{}, orig...)
		copy(model[3*cc+10:], "changed")
		sp := changeSpool(t, s, model, []int64{3})
		size := int64(len(model))
		nfi, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: size, Keep: size, Dirty: dirty(3), Spool: sp},
			bytes.NewReader(model), store.CommitOptions{Adopt: true})
		if err != nil {
			t.Fatal(name, err)
		}
		if st.Changes || st.HashedBytes != size {
			t.Fatalf("%s: stats %+v, want a whole commit", name, st)
		}
		if got := get(t, s, name); !bytes.Equal(got, model) {
			t.Fatalf("%s: content differs", name)
		}
		// Nothing kept: the spool is the whole content.
		model = randBytes(9*cc+5, 7+10*uint64(k))
		sp = changeSpool(t, s, model, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
		_, st, err = s.CommitChanges(ctx, nfi.Ino, store.Changes{Size: int64(len(model)), Dirty: dirty(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), Spool: sp},
			nil, store.CommitOptions{Adopt: true})
		if err != nil {
			t.Fatal(name, err)
		}
		if st.Changes || !st.Adopted {
			t.Fatalf("%s: stats %+v, want a whole commit that adopts the spool", name, st)
		}
		if got := get(t, s, name); !bytes.Equal(got, model) {
			t.Fatalf("%s: rewritten content differs", name)
		}
	}
}

// TestCommitChangesNewFileAdopts: a new file written whole, its cells
// summed as written, is committed without hashing and its spool adopted.
func TestCommitChangesNewFileAdopts(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true, AdoptMinBytes: 1}})
	fi, err := s.CreateAt(1, "n", 0o644, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	model := randBytes(32*cc+50, 8)
	cells, d := summedCells(model)
	sp := changeSpool(t, s, model, cells)
	_, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: int64(len(model)), Dirty: d, Spool: sp},
		nil, store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Adopted || st.HashedBytes != 50 || st.NewBytes != int64(len(model)) {
		t.Fatalf("stats %+v: want adopted, only the 50-byte last cell hashed", st)
	}
	if got := get(t, s, "n"); !bytes.Equal(got, model) {
		t.Fatal("content differs")
	}
}

// TestCommitChangesLargeRun: a run of dirty cells longer than a batch of
// the ingest (16 MiB), none hashed while written, is read and hashed whole.
func TestCommitChangesLargeRun(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true}})
	fi, err := s.CreateAt(1, "n", 0o644, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	model := randBytes(20<<20+5, 9)
	var cells []int64
	for i := int64(0); i*cc < int64(len(model)); i++ {
		cells = append(cells, i)
	}
	sp := changeSpool(t, s, model, cells)
	_, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: int64(len(model)), Dirty: dirty(cells...), Spool: sp},
		nil, store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.HashedBytes != int64(len(model)) {
		t.Fatalf("stats %+v: want every byte hashed", st)
	}
	if got := get(t, s, "n"); !bytes.Equal(got, model) {
		t.Fatal("content differs")
	}
}

// TestCommitChangesMovesPins: a commit that takes over the caller's hold
// and open file of the version it replaces releases that version in its
// own transaction when nothing else pins it (its inode is gone at once),
// and leaves it an orphan, released at its last close, when a reader pins
// it; either way the counts stay right (Check) and the caller's Close
// does nothing more.
func TestCommitChangesMovesPins(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true}})
	model := randBytes(50*cc, 10)
	put(t, s, "f", model)
	fi, _ := s.Stat("f")
	ino := fi.Ino
	for round, reader := range []bool{false, true} {
		if err := s.Hold(ino); err != nil {
			t.Fatal(err)
		}
		base, err := s.OpenIno(ino)
		if err != nil {
			t.Fatal(err)
		}
		var r *store.File
		if reader {
			if r, err = s.OpenIno(ino); err != nil {
				t.Fatal(err)
			}
		}
		old := append([]byte{}, model...)
		copy(model[7*cc+9:], randBytes(100, uint64(20+round)))
		sp := changeSpool(t, s, model, []int64{7})
		size := int64(len(model))
		nfi, _, err := s.CommitChanges(ctx, ino, store.Changes{Size: size, Keep: size, Dirty: dirty(7), Spool: sp},
			nil, store.CommitOptions{Hold: true, Unhold: true, Close: []*store.File{base}})
		if err != nil {
			t.Fatal(err)
		}
		base.Close() // does nothing: the commit closed it
		_, err = s.StatIno(ino)
		if gone := err != nil; gone == reader {
			t.Fatalf("round %d: the replaced version is gone: %v, want %v", round, gone, !reader)
		}
		if reader {
			buf := make([]byte, size)
			if _, err := r.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, old) {
				t.Fatalf("the reader of the replaced version reads other bytes (%v)", err)
			}
			if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
				t.Fatal(err)
			}
			r.Close()
			if _, err := s.StatIno(ino); err == nil {
				t.Fatal("the orphan outlived its last close")
			}
		}
		if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
			t.Fatal(err)
		}
		if got := get(t, s, "f"); !bytes.Equal(got, model) {
			t.Fatal("content differs")
		}
		if err := s.Unhold(nfi.Ino); err != nil {
			t.Fatal(err)
		}
		ino = nfi.Ino
	}
}

// TestCommitChangesBlobSum: a new blob whose writer hashed it whole as it
// was written (Changes.BlobSum) commits through its dirty cells, with no
// byte read or hashed when every full cell was summed, and is the blob its
// sha256 names: AdoptBlob finds it from another blocks directory. A given
// sum that is not the name's fails the commit (ErrBlobMismatch) and
// leaves nothing behind; with part of the previous version kept, or
// outside a blocks directory, the sum is ignored.
func TestCommitChangesBlobSum(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true, AdoptMinBytes: 1 << 30}})
	if err := s.Mkdir("a/blocks", 0o700, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Mkdir("b/blocks", 0o700, true); err != nil {
		t.Fatal(err)
	}
	dirIno := func(p string) uint64 {
		fi, err := s.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Ino
	}
	// summedChanges describes model as a new file whose full cells were
	// summed as written.
	summedChanges := func(model []byte) store.Changes {
		cells, d := summedCells(model)
		return store.Changes{Size: int64(len(model)), Dirty: d, Spool: changeSpool(t, s, model, cells),
			BlobSum: blockstore.Sum(model), BlobSummed: true}
	}
	for _, size := range []int{0, cc, 7*cc + 123, 9 * cc} {
		model := randBytes(size, uint64(size)+1)
		h := sha256hex(model)
		fi, err := s.CreateAt(dirIno("a/blocks"), h, 0o600, store.Owner{})
		if err != nil {
			t.Fatal(err)
		}
		cfi, st, err := s.CommitChanges(ctx, fi.Ino, summedChanges(model), nil, store.CommitOptions{Adopt: true})
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if want := int64(size % cc); !st.Changes || st.Kind != "blob" || st.HashedBytes != want {
			t.Fatalf("%d bytes: stats %+v, want a blob committed as changes, %d bytes hashed", size, st, want)
		}
		if got := get(t, s, "a/blocks/"+h); !bytes.Equal(got, model) {
			t.Fatalf("%d bytes: content differs", size)
		}
		nfi, err := s.StatIno(cfi.Ino)
		if err != nil || nfi.Blob != h {
			t.Fatalf("%d bytes: blob %q (%v), want %s", size, nfi.Blob, err, h)
		}
		if _, err := s.AdoptBlob(dirIno("b/blocks"), h, nil); err != nil {
			t.Fatalf("%d bytes: adopt from another blocks directory: %v", size, err)
		}
		if got := get(t, s, "b/blocks/"+h); !bytes.Equal(got, model) {
			t.Fatalf("%d bytes: adopted content differs", size)
		}
	}

	// A sum that is not the name's.
	model := randBytes(5*cc, 99)
	h := sha256hex(model)
	fi, err := s.CreateAt(dirIno("a/blocks"), h, 0o600, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	ch := summedChanges(model)
	ch.BlobSum = blockstore.Sum([]byte("other"))
	if _, _, err := s.CommitChanges(ctx, fi.Ino, ch, nil, store.CommitOptions{Adopt: true}); !errors.Is(err, store.ErrBlobMismatch) {
		t.Fatalf("wrong sum: %v, want ErrBlobMismatch", err)
	}
	if nfi, err := s.Stat("a/blocks/" + h); err != nil || nfi.Size != 0 {
		t.Fatalf("after a failed commit: %+v, %v; want the empty file", nfi, err)
	}

	// Kept bytes: the sum is ignored, the whole content read and hashed.
	put(t, s, "a/blocks/k", model)
	kfi, _ := s.Stat("a/blocks/k")
	changed := append([]byte{}, model...)
	copy(changed[2*cc:], "changed")
	ch = store.Changes{Size: int64(len(changed)), Keep: int64(len(changed)), Dirty: dirty(2),
		Spool: changeSpool(t, s, changed, []int64{2}), BlobSum: blockstore.Sum([]byte("ignored")), BlobSummed: true}
	cfi, st, err := s.CommitChanges(ctx, kfi.Ino, ch, bytes.NewReader(changed), store.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nfi, _ := s.StatIno(cfi.Ino); st.Changes || nfi.Blob != sha256hex(changed) {
		t.Fatalf("kept bytes: stats %+v, blob %q; want a whole commit as blob %s", st, nfi.Blob, sha256hex(changed))
	}

	// Not in a blocks directory: a plain file, whatever the sum.
	pfi, err := s.CreateAt(dirIno("a"), "plain", 0o600, store.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	ch = summedChanges(model)
	ch.BlobSum = blockstore.Sum([]byte("ignored"))
	if cfi, st, err = s.CommitChanges(ctx, pfi.Ino, ch, nil, store.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if nfi, _ := s.StatIno(cfi.Ino); st.Kind == "blob" || nfi.Blob != "" || !bytes.Equal(get(t, s, "a/plain"), model) {
		t.Fatalf("plain file: stats %+v, blob %q", st, nfi.Blob)
	}
}
