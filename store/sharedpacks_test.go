package store_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// commitSpooled stores b as a new file name the way the mount does: a new
// inode, a spool file in the store, and a commit that may adopt the spool.
func commitSpooled(s *store.Store, name string, b []byte) (*store.PutStats, error) {
	fi, err := s.CreateAt(manifest.RootIno, name, 0o644, store.Owner{})
	if err != nil {
		return nil, err
	}
	sp, err := os.CreateTemp(filepath.Join(s.Dir(), "spool"), "w-")
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	if _, err := sp.Write(b); err != nil {
		return nil, err
	}
	_, st, err := s.CommitIno(ctx, fi.Ino, sp, int64(len(b)), store.CommitOptions{Mtime: time.Now(), Adopt: true})
	if err != nil {
		return nil, err
	}
	if !st.Adopted {
		os.Remove(sp.Name())
	}
	return st, nil
}

// packBound is issue 9's bound on the packs of a store of small files:
// the stored bytes divided by 16 MiB, plus 8.
func packBound(t testing.TB, s *store.Store) (packs, bound int64) {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.Packs, st.StoredBytes/(16<<20) + 8
}

// smallSize is a size between 4 KiB and 64 KiB.
func smallSize(r *rand.Rand) int { return 4096 + r.IntN(60<<10+1) }

// TestSmallFilesSharePacks: 10,000 small files (4–64 KiB, each new,
// committed from a spool as the mount commits, by 8 writers at once) leave
// at most stored bytes / 16 MiB + 8 packs, and read back exactly. Before,
// each became a pack of its own (its spool adopted): 10,000 packs.
func TestSmallFilesSharePacks(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	files := 10000
	if testing.Short() {
		files = 2000
	}
	const writers = 8
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := w; i < files; i += writers {
				st, err := commitSpooled(s, fmt.Sprint("f", i), randBytes(smallSize(r), uint64(i)))
				if err != nil {
					t.Error(err)
					return
				}
				if st.Adopted {
					t.Errorf("file %d: a small spool was adopted as a pack of its own", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	packs, bound := packBound(t, s)
	t.Logf("%d files: %d packs, bound %d", files, packs, bound)
	if packs > bound {
		t.Fatalf("%d packs for %d small files; want at most %d", packs, files, bound)
	}
	if n := len(packFiles(t, s.Dir())); int64(n) != packs {
		t.Fatalf("%d pack files, %d packs in the index", n, packs)
	}
	for w := 0; w < writers; w++ {
		r := rand.New(rand.NewPCG(uint64(w), 1))
		for i := w; i < files; i += writers {
			if got := get(t, s, fmt.Sprint("f", i)); !bytes.Equal(got, randBytes(smallSize(r), uint64(i))) {
				t.Fatalf("f%d reads back wrong", i)
			}
		}
	}
}

// TestSharedPacksConcurrent: writers committing, rewriting and removing
// small files at once, with content shared between them half the time,
// into packs that fill up and are closed while others append: every file
// reads back, the store checks clean (live + dead = committed for every
// pack), and packs grow with the bytes, not the commits. Run with -race.
func TestSharedPacksConcurrent(t *testing.T) {
	const packBytes = 1 << 20
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{PackBytes: packBytes}})
	const writers, rounds = 8, 60
	want := make([]map[string][]byte, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		want[w] = map[string][]byte{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for i := 0; i < rounds; i++ {
				name := fmt.Sprintf("w%d-%d", w, r.IntN(8))
				seed := uint64(w*1000 + i)
				if r.IntN(2) == 0 {
					seed = uint64(r.IntN(4)) // content other writers store too
				}
				b := randBytes(smallSize(r), seed)
				switch r.IntN(6) {
				case 0:
					if _, ok := want[w][name]; ok {
						if err := s.Remove(name); err != nil {
							t.Error(err)
							return
						}
						delete(want[w], name)
					}
					continue
				case 1, 2:
					_, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), name, store.PutOptions{})
					if err != nil {
						t.Error(err)
						return
					}
				default:
					if _, ok := want[w][name]; ok {
						if err := s.Remove(name); err != nil {
							t.Error(err)
							return
						}
					}
					if _, err := commitSpooled(s, name, b); err != nil {
						t.Error(err)
						return
					}
				}
				want[w][name] = b
			}
		}()
	}
	wg.Wait()
	for w := range want {
		for name, b := range want[w] {
			if got := get(t, s, name); !bytes.Equal(got, b) {
				t.Fatalf("%s reads back wrong", name)
			}
		}
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	// Packs are closed a chunk short of full at most, and up to one per
	// writer is open while they run; a pack goes once all of it is dead.
	if limit := st.PackBytes/(packBytes-64<<10) + writers + 1; st.Packs > limit {
		t.Fatalf("%d packs for %d committed bytes in packs of %d; want at most %d", st.Packs, st.PackBytes, packBytes, limit)
	}
	t.Logf("%d packs, %d bytes committed, %d dead", st.Packs, st.PackBytes, st.DeadBytes)
}

// TestSharedPacksRemovedWhenDead: once every file is removed, every pack
// is removed, file and record — those filled and closed, and those still
// open for appending.
func TestSharedPacksRemovedWhenDead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, ChunkSize: 4096, Store: store.Options{PackBytes: 1 << 20}})
	const files = 300
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += 4 {
				if _, err := commitSpooled(s, fmt.Sprint("f", i), randBytes(4096+i*97%60000, uint64(i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(packFiles(t, dir)); n < 4 {
		t.Fatalf("%d packs; the test wants several full ones", n)
	}
	for i := 0; i < files; i++ {
		if err := s.Remove(fmt.Sprint("f", i)); err != nil {
			t.Fatal(err)
		}
	}
	if left := packFiles(t, dir); len(left) != 0 {
		t.Fatalf("packs %v left with no file", left)
	}
	if st, _ := s.Stats(); st.Packs != 0 || st.PackBytes != 0 {
		t.Fatalf("the index keeps %d packs, %d bytes", st.Packs, st.PackBytes)
	}
	// The store appends to a new pack.
	put(t, s, "g", randBytes(10000, 9))
	if n := len(packFiles(t, dir)); n != 1 {
		t.Fatalf("%d packs for one new file", n)
	}
}

// TestSharedPackGarbageTail: after a crash, a shared pack may be longer
// than its committed length (ranges that ingests wrote, and even synced,
// but did not commit). Opening the store cuts them off, so that each pack
// is exactly its committed length; new commits append after the committed
// bytes, and everything reads back.
func TestSharedPackGarbageTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, ChunkSize: 4096})
	files := map[string][]byte{}
	for i := 0; i < 20; i++ {
		name := fmt.Sprint("f", i)
		files[name] = randBytes(5000+i*1000, uint64(i))
		put(t, s, name, files[name])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	packs := packFiles(t, dir)
	if len(packs) != 1 {
		t.Fatalf("%d packs for 20 small files put one after another, want 1", len(packs))
	}
	before, _ := os.Stat(packs[0])
	f, err := os.OpenFile(packs[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(randBytes(300000, 99)); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()

	s, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer storetest.MustCheck(t, s)
	if after, _ := os.Stat(packs[0]); after.Size() != before.Size() {
		t.Fatalf("pack is %d bytes after reopening, committed %d", after.Size(), before.Size())
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	for i := 20; i < 40; i++ {
		name := fmt.Sprint("f", i)
		files[name] = randBytes(5000+i*1000, uint64(i))
		put(t, s, name, files[name])
	}
	if n := len(packFiles(t, dir)); n != 1 {
		t.Fatalf("%d packs after more commits, want the one appended to", n)
	}
	for name, b := range files {
		if got := get(t, s, name); !bytes.Equal(got, b) {
			t.Fatalf("%s reads back wrong", name)
		}
	}
}

// TestSharedPackSpaceReclaimed: removing files from a shared pack frees
// their disk space, though they lie at offsets that are no page multiple
// (a 300,000-byte file after another): each file's ranges start on a page
// and its dead chunks are punched as one range. Before, each 4 KiB chunk
// was punched alone across two pages, and freed nothing.
func TestSharedPackSpaceReclaimed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{Dir: dir, ChunkSize: 4096})
	for i, name := range []string{"a", "b", "c", "d"} {
		if _, err := commitSpooled(s, name, randBytes(300000, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	packs := packFiles(t, dir)
	if len(packs) != 1 {
		t.Fatalf("%d packs for four small files", len(packs))
	}
	before := diskBytes(t, packs[0])
	for _, name := range []string{"b", "c"} {
		if err := s.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	s.WaitReclaim() // punches run in the background
	if freed := before - diskBytes(t, packs[0]); freed < 2*(300000-8192) {
		t.Fatalf("removing two 300,000-byte files freed %d bytes of their pack", freed)
	}
	for i, name := range []string{"a", "d"} {
		if !bytes.Equal(get(t, s, name), randBytes(300000, uint64(i*3))) {
			t.Fatalf("%s reads back wrong", name)
		}
	}
}

// diskBytes is the disk space a file takes.
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
