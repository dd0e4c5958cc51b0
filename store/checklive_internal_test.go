package store

import (
	"bytes"
	"context"
	"github.com/kvfs/kvfs/blockstore"
	"github.com/kvfs/kvfs/manifest"
	"math/rand/v2"
	"os"
	"testing"
)

// TestLiveCheck: while an ingest has appended its chunks to a pack but
// not committed them, a check of one look reports the pack (longer than
// committed, or not in the index), a live check reports nothing; a byte
// flipped in a committed chunk is reported by both (with Verify).
func TestLiveCheck(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	b := make([]byte, 300_000)
	r := rand.New(rand.NewPCG(4, 5))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "a", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var once, live []Problem
	var errOnce, errLive error
	s.beforeCommit = func() {
		s.beforeCommit = nil
		once, errOnce = s.Problems(ctx, CheckOptions{})
		live, errLive = s.Problems(ctx, CheckOptions{Live: true})
	}
	b2 := append([]byte{}, b...)
	for i := range b2 {
		b2[i] ^= 0x5a
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(b2), int64(len(b2)), "b", PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if errOnce != nil || errLive != nil {
		t.Fatal(errOnce, errLive)
	}
	if len(once) == 0 {
		t.Fatal("a check of one look during an ingest found nothing: the test does not catch an ingest in flight")
	}
	if len(live) != 0 {
		t.Fatalf("live check during an ingest: %v", live)
	}
	if p, err := s.Problems(ctx, CheckOptions{Live: true, Verify: true}); err != nil || len(p) != 0 {
		t.Fatalf("live check after the commit: %v %v", p, err)
	}

	// A flipped byte of a committed chunk is a fault: the live check
	// finds it.
	var loc blockstore.Loc
	var id blockstore.ID
	err := s.db.View(func(tx *manifest.Tx) error {
		return tx.ForEachChunk(func(cid blockstore.ID, c manifest.Chunk) error {
			id, loc = cid, c.Loc
			return nil
		})
	})
	if err != nil || loc.Len == 0 {
		t.Fatalf("no chunk (%v)", err)
	}
	f, err := os.OpenFile(s.packs.Path(loc.Pack), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := []byte{0}
	f.ReadAt(one, loc.Off+10)
	one[0] ^= 1
	if _, err := f.WriteAt(one, loc.Off+10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p, err := s.Problems(ctx, CheckOptions{Live: true, Verify: true})
	if err != nil || len(p) != 1 || p[0].Kind != ProblemLost || p[0].Chunk != id {
		t.Fatalf("live check of a flipped byte in chunk %s: %v %v", id, p, err)
	}
}
