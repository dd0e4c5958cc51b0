package fs

import (
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/store/storetest"
)

// TestSpoolWriteAhead: a spool written in order from its start has its
// writeback started every writeAheadBytes once writeAheadFrom bytes are
// in (so that the fsync of the adopted spool at its commit finds little
// left to write), also when its first bytes are written last (the
// engine's header), and a spool written out of order does not.
func TestSpoolWriteAhead(t *testing.T) {
	const C = 64 << 10
	s := storetest.New(t, storetest.Options{ChunkSize: C})
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7) | 1
	}
	total := int64(writeAheadFrom + 3*writeAheadBytes + 1<<20)

	sp, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close(true)
	for off := int64(0); off < total; off += int64(len(buf)) {
		if _, err := sp.write(buf, off); err != nil {
			t.Fatal(err)
		}
		if off+int64(len(buf)) < writeAheadFrom && sp.flushed != 0 {
			t.Fatalf("writeback started at %d bytes, before %d", off+int64(len(buf)), writeAheadFrom)
		}
	}
	if sp.flushed < total-writeAheadBytes {
		t.Fatalf("writeback started for %d of %d bytes written in order", sp.flushed, total)
	}

	// The engine's order: the tensors from the end of the header on,
	// then the header into the hole left for it.
	const head = 16 << 10
	last, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer last.close(true)
	for off := int64(head); off < total; off += int64(len(buf)) {
		if _, err := last.write(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := last.write(buf[:head], 0); err != nil {
		t.Fatal(err)
	}
	if last.flushed < total-writeAheadBytes || last.seq < 0 {
		t.Fatalf("header written last: writeback started for %d of %d bytes (in order: %v)", last.flushed, total, last.seq >= 0)
	}

	rnd, err := newSpool(filepath.Join(s.Dir(), "spool"), nil, C, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rnd.close(true)
	if _, err := rnd.write(buf, 5<<20); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < total; off += int64(len(buf)) {
		if _, err := rnd.write(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if rnd.flushed != 0 {
		t.Fatalf("writeback of a spool written out of order: %d bytes", rnd.flushed)
	}
}
