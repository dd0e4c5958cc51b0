package store

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/kvfs/kvfs/manifest"
)

// TestCompactSkipsHeldAndTainted: a mostly dead pack that an ingest holds
// (an appender in use, or an adoption) or that a data record not yet
// checkpointed may write again is left alone, and counted skipped; once
// released (and the taint covered), the same pack is rewritten.
func TestCompactSkipsHeldAndTainted(t *testing.T) {
	s, _ := newTestStore(t)
	s.packBytes = 64 << 10
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		b := bytes.Repeat([]byte{byte(i), byte(i >> 3), 7}, 5000)
		if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), fmt.Sprint("f", i), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i++ {
		if i%4 != 0 {
			if err := s.Remove(fmt.Sprint("f", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.WaitReclaim()
	var cands []uint32
	s.db.View(func(tx *manifest.Tx) error {
		packs, _ := tx.Packs()
		for k, p := range packs {
			if p.Committed > 0 && !isDead(p) && p.Dead*2 >= p.Committed {
				cands = append(cands, k)
			}
		}
		return nil
	})
	if len(cands) < 2 {
		t.Fatalf("%d mostly dead packs; the test needs 2", len(cands))
	}
	s.closeAppendPacks()
	held, tainted := cands[0], cands[1]
	s.mu.Lock()
	s.held[held] = true // as an adoption holds its pack
	s.mu.Unlock()
	s.taintPack(tainted, math.MaxUint64, math.MaxInt64) // no checkpoint covers it
	res, err := s.Compact(ctx, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.PacksSkipped != 2 {
		t.Fatalf("%d packs skipped, want 2 (one held, one tainted): %+v", res.PacksSkipped, *res)
	}
	exists := func(pack uint32) bool {
		var ok bool
		s.db.View(func(tx *manifest.Tx) error {
			p, err := tx.Pack(pack) // an unknown pack has the zero state
			ok = err == nil && p.Committed > 0
			return nil
		})
		return ok
	}
	if !exists(held) || !exists(tainted) {
		t.Fatal("a held or tainted pack was rewritten")
	}
	if err := s.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	delete(s.held, held)
	s.mu.Unlock()
	s.inline.mu.Lock()
	delete(s.inline.tainted, tainted)
	s.inline.mu.Unlock()
	res, err = s.Compact(ctx, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if exists(held) || exists(tainted) {
		t.Fatalf("packs released from hold and taint were not rewritten: %+v", *res)
	}
	for i := 0; i < 40; i += 4 {
		f, err := s.Open(fmt.Sprint("f", i))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, f.Size())
		_, err = f.ReadAt(got, 0)
		f.Close()
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i), byte(i >> 3), 7}, 5000)) {
			t.Fatalf("f%d changed: %v", i, err)
		}
	}
	if err := s.Check(ctx, CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
