package store_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestProblemsVerifyWindows: --verify's pack-sequential reads (several
// packs, several 8 MiB windows each) find exactly the chunk holding a
// flipped byte, at its pack and offset, and report progress up to the
// total.
func TestProblemsVerifyWindows(t *testing.T) {
	s := storetest.New(t, storetest.Options{Store: store.Options{PackBytes: 16 << 20}})
	data := make([]byte, 40<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	ctx := context.Background()
	if _, _, err := s.Put(ctx, bytes.NewReader(data), int64(len(data)), "/f", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(s.Dir(), "packs", "*.pack"))
	sort.Strings(packs)
	if len(packs) < 2 {
		t.Fatalf("want several packs, got %v", packs)
	}
	victim := packs[1]
	const at = 10<<20 + 123
	flip := func() {
		f, err := os.OpenFile(victim, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, at); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 1
		if _, err := f.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
	}
	flip()
	defer flip() // restored for the cleanup's check
	var done, total atomic.Int64
	problems, err := s.Problems(ctx, store.CheckOptions{Verify: true, Progress: func(d, n int64) {
		for { // the largest seen: calls come from several goroutines
			if old := done.Load(); d <= old || done.CompareAndSwap(old, d) {
				break
			}
		}
		total.Store(n)
	}})
	if err != nil {
		t.Fatal(err)
	}
	pack, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(victim), ".pack"), 10, 32)
	if len(problems) != 1 || problems[0].Kind != store.ProblemLost || problems[0].Loc.Pack != uint32(pack) ||
		problems[0].Loc.Off > at || problems[0].Loc.End() <= at {
		t.Fatalf("problems %+v, want one lost chunk in pack %d around %d", problems, pack, at)
	}
	if done.Load() != total.Load() || total.Load() != int64(len(data)) {
		t.Errorf("progress %d of %d, want %d", done.Load(), total.Load(), len(data))
	}
}
