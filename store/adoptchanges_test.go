package store_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestCommitChangesAdoptsLargeChange: a change of at least AdoptMinBytes
// new bytes to a large file adopts the spool as a pack, though the change
// is far less than half of the file (issue 9, "4 fsync writers": before,
// every such fsync copied its 35 MiB into a shared pack first); a smaller
// change is copied, as before. The content reads back exact, the check
// verifies every chunk, and the adopted pack takes about the change's
// space on disk once its holes are punched.
func TestCommitChangesAdoptsLargeChange(t *testing.T) {
	const cells, minBytes = 1024, 64 * cc
	s := storetest.New(t, storetest.Options{ChunkSize: cc, Store: store.Options{FixedChunks: true, AdoptMinBytes: minBytes}})
	model := randBytes(cells*cc, 1)
	put(t, s, "f", model)
	fi, err := s.Stat("f")
	if err != nil {
		t.Fatal(err)
	}
	// 80 changed cells in runs of 8 spread over the file: 320 KiB of 4 MiB.
	var changed []int64
	for run := int64(0); run < 10; run++ {
		for i := range int64(8) {
			changed = append(changed, run*100+i)
		}
	}
	for _, i := range changed {
		copy(model[i*cc:(i+1)*cc], randBytes(cc, uint64(100+i)))
	}
	sp := changeSpool(t, s, model, changed)
	size := int64(len(model))
	nfi, st, err := s.CommitChanges(ctx, fi.Ino, store.Changes{Size: size, Keep: size, Dirty: dirty(changed...), Spool: sp},
		bytes.NewReader(model), store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Changes || !st.Adopted || st.NewBytes != int64(len(changed))*cc {
		t.Fatalf("stats %+v: want the change's spool adopted with %d new bytes", st, len(changed)*cc)
	}
	if _, err := os.Stat(sp.Name()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("adopted spool still in the spool directory")
	}
	if got := get(t, s, "f"); !bytes.Equal(got, model) {
		t.Fatal("content after an adopted change differs")
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	s.WaitReclaim()
	var onDisk int64
	for _, p := range packFiles(t, s.Dir()) {
		onDisk += diskBytes(t, p)
	}
	// The first version's pack (4 MiB, 80 cells punched) and the adopted
	// one (80 cells): about the file's size, not the file's size twice.
	if onDisk > size+size/4 {
		t.Fatalf("packs take %d bytes for a %d-byte file", onDisk, size)
	}

	// A change below AdoptMinBytes is copied.
	copy(model[500*cc:501*cc], randBytes(cc, 9))
	sp = changeSpool(t, s, model, []int64{500})
	_, st, err = s.CommitChanges(ctx, nfi.Ino, store.Changes{Size: size, Keep: size, Dirty: dirty(500), Spool: sp},
		bytes.NewReader(model), store.CommitOptions{Adopt: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Adopted {
		t.Fatalf("stats %+v: a one-cell change adopted", st)
	}
	if got := get(t, s, "f"); !bytes.Equal(got, model) {
		t.Fatal("content after a copied change differs")
	}
}
