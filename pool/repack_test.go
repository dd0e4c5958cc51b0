package pool_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// TestRepack: a pack whose chunks no name reaches but a few is rewritten
// by a collection with a threshold: its live chunks are copied into a new
// pack, the names that used it move to manifests that use the copy, and
// the sweep deletes the old pack, so the pool's pack bytes fall to about
// what is live. A dry run changes nothing. A file opened on another host
// before the rewrite (its manifest names the old pack) still reads
// byte-identical after it: a chunk whose pack is gone is found where the
// names now place it, and checked. Every file reads the same throughout.
func TestRepack(t *testing.T) {
	s := startServices(t)
	fixed := s.config(t, "")
	fixed.FixedChunks = true // the live bytes below count 64 KiB chunks
	a := s.host(t, fixed)
	b := s.host(t, s.config(t, "")) // no cache: every read is a GET
	// x fills one pack (16 chunks of 64 KiB); y shares x's first two
	// chunks and starts a pack of its own; z is unrelated.
	x := randBytes(1<<20, 11)
	y := append(bytes.Clone(x[:128<<10]), randBytes(200_000, 12)...)
	z := randBytes(300_000, 13)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"x", x}, {"y", y}, {"z", z}} {
		if err := a.Publish(ctx, f.name, bytes.NewReader(f.b), int64(len(f.b))); err != nil {
			t.Fatal(err)
		}
	}
	early, err := b.Open(ctx, "y") // before the rewrite
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	before, nBefore := packBytes(t, s)

	// Within the grace period nothing is rewritten: the pack is young.
	st, err := a.Collect(ctx, pool.CollectOptions{Threshold: 0.5})
	if err != nil || st.Repack.Packs != 0 {
		t.Fatalf("collect within the grace period: %+v, %v", st, err)
	}
	st, err = a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.5, DryRun: true})
	if err != nil || st.Repack.Packs != 1 || st.Repack.CopiedBytes != 128<<10 {
		t.Fatalf("dry run: %+v, %v; want one pack with 128 KiB live", st, err)
	}
	if now, n := packBytes(t, s); now != before || n != nBefore {
		t.Fatal("a dry run changed the packs")
	}

	st, err = a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	after, nAfter := packBytes(t, s)
	t.Logf("repack: %+v; packs %d → %d, pack bytes %d → %d", st, nBefore, nAfter, before, after)
	if st.Repack.Packs != 1 || st.Repack.Names != 1 || st.Repack.NewPacks != 1 || st.Repack.CopiedBytes != 128<<10 {
		t.Fatalf("repack: %+v, want x's pack rewritten (128 KiB live) and y moved", st.Repack)
	}
	// x's whole pack went; what is left is y's and z's chunks, once.
	if want := int64(len(y) + len(z)); after != want {
		t.Fatalf("pack bytes after the repack: %d, want %d (y and z, each chunk once)", after, want)
	}
	for _, h := range []*pool.Pool{a, b} {
		checkFile(t, h, "y", y, 21)
		checkFile(t, h, "z", z, 22)
	}
	got, err := io.ReadAll(io.NewSectionReader(early, 0, early.Size()))
	if err != nil || !bytes.Equal(got, y) {
		t.Fatalf("y opened before the repack: %v (%d bytes, equal %v)", err, len(got), bytes.Equal(got, y))
	}

	// Nothing is sparse now: a second collection rewrites nothing.
	st, err = a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.5})
	if err != nil || st.Repack.Packs != 0 || st.Deleted != 0 {
		t.Fatalf("second collection: %+v, %v; want nothing to do", st, err)
	}
}
