package gc_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func putFile(t testing.TB, s *store.Store, path string, b []byte) {
	t.Helper()
	if _, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), path, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func evictedPaths(es []store.Evicted) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	return out
}

func stored(t *testing.T, s *store.Store) int64 {
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st.StoredBytes
}

// An open file and a pinned one stay; the idle ones go oldest first, until
// stored bytes are under the low-water mark; a read counts as a use.
func TestEvictLRUStore(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	for i := 1; i <= 6; i++ {
		putFile(t, s, fmt.Sprintf("/f%d", i), randBytes(16<<10, uint64(i)))
		time.Sleep(time.Millisecond)
	}
	open, err := s.Open("/f1")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := s.KeepPath("/f2", true); err != nil {
		t.Fatal(err)
	}
	f, err := s.Open("/f3") // a use: f3 is now the most recent
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.SetSettings(map[string]string{"capacity": "64K"}); err != nil {
		t.Fatal(err)
	}
	got, err := gc.Evict(s)
	if err != nil {
		t.Fatal(err)
	}
	// 96 KiB stored, low water 90% of 64 KiB = 57.6 KiB: three 16 KiB
	// files go, the idle ones by age: f4, f5, f6 (f3 was read last).
	if want := []string{"/f4", "/f5", "/f6"}; !slices.Equal(evictedPaths(got), want) {
		t.Fatalf("evicted %v, want %v", evictedPaths(got), want)
	}
	if n := stored(t, s); n > 64<<10*90/100 {
		t.Fatalf("stored %d after eviction", n)
	}
	for _, p := range []string{"/f1", "/f2", "/f3"} {
		if _, err := s.Stat(p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if c := s.EvictionCounts(); c.Files != 3 || c.LRU != 3 || c.Bytes != 48<<10 {
		t.Fatalf("counts %+v", c)
	}
	// Under capacity: nothing more goes.
	if got, err := gc.Evict(s); err != nil || len(got) != 0 {
		t.Fatalf("second eviction: %v %v", evictedPaths(got), err)
	}
}

// The uses counted in memory reach the index, so the order survives a
// reopen; and the settings persist.
func TestEvictUsesSurviveReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Dir: dir})
	for i := 1; i <= 3; i++ {
		putFile(t, s, fmt.Sprintf("/f%d", i), randBytes(8<<10, uint64(i)))
		time.Sleep(time.Millisecond)
	}
	f, err := s.Open("/f1")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := s.SetSettings(map[string]string{"capacity": "20K", "low_water": "50", "retention": "lru"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st := s2.Settings(); st.Capacity != 20<<10 || st.LowWater != 50 || st.Retention != "lru" {
		t.Fatalf("settings after reopen %+v", st)
	}
	got, err := gc.Evict(s2)
	if err != nil {
		t.Fatal(err)
	}
	// 24 KiB over 20 KiB, down to 10 KiB: two go, f2 and f3 (f1 was read).
	if want := []string{"/f2", "/f3"}; !slices.Equal(evictedPaths(got), want) {
		t.Fatalf("evicted %v, want %v", evictedPaths(got), want)
	}
}

// cost-size on a store: priority uses/bytes (cost 1 for plain files),
// bytes being what each frees: a file whose chunks another file shares
// frees nothing and goes last.
func TestEvictCostSizeStore(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	big := randBytes(32<<10, 1)
	putFile(t, s, "/big", big)                         // frees nothing while /shared is there
	putFile(t, s, "/small", randBytes(8<<10, 2))       // 8 KiB, never used: 1/8192
	putFile(t, s, "/hot", randBytes(32<<10, 3))        // 32 KiB, 2 uses: 2/32768
	putFile(t, s, "/shared", append([]byte{}, big...)) // frees nothing while /big is there
	for range 2 {
		f, err := s.Open("/hot")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if _, err := s.SetSettings(map[string]string{"capacity": "64K", "retention": "cost-size", "low_water": "60"}); err != nil {
		t.Fatal(err)
	}
	// Stored: 32 (big and shared, once) + 8 + 32 = 72 KiB; low water
	// 38.4 KiB, so 33.6 KiB must go. Priorities: /hot 2/32768, /small
	// 1/8192, /big and /shared 1/1 (nothing freed counts as 1 byte).
	// /hot (32 KiB) then /small (8 KiB) free 40 KiB.
	got, err := gc.Evict(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/hot", "/small"}; !slices.Equal(evictedPaths(got), want) {
		t.Fatalf("evicted %v, want %v", evictedPaths(got), want)
	}
	if age := s.RetentionAge(); age != 1.0/8192 {
		t.Fatalf("age %v, want %v", age, 1.0/8192)
	}
	if c := s.EvictionCounts(); c.CostSize != 2 {
		t.Fatalf("counts %+v", c)
	}
}

func TestSettingsErrors(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	for _, kv := range []map[string]string{{"capacity": "12X"}, {"capacity": "-1"}, {"retention": "fifo"}, {"low_water": "0"}, {"colour": "red"}} {
		if _, err := s.SetSettings(kv); err == nil {
			t.Fatalf("%v accepted", kv)
		}
	}
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "4K": 4096, "3M": 3 << 20, "2G": 2 << 30, "1T": 1 << 40, "5MiB": 5 << 20} {
		if n, err := store.ParseSize(in); err != nil || n != want {
			t.Fatalf("ParseSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
}
