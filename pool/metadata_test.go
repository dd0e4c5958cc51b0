package pool_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/pool"
)

// The pool against metadata that lies or moves: a snapshot record that
// lies about its tokens, a repack, a name whose manifest is missing, a name
// rewritten under a host that opened it, names that no publish wrote.
// The first four were found by red team 21, each test as it was found.

// TestMatchAnswersFromHeader: a manifest whose snapshot record lies
// about the token count (the record of a shorter snapshot with the same
// first keys) must not change the answer: the token count and the trim
// come from the header the lookup read.
func TestMatchAnswersFromHeader(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	c := s.host(t, s.config(t, ""))
	base := snapgen.Tokens(2000, 1)
	publishSnap(t, a, "fp/real.mlxkv", base[:1500], nil)
	publishSnap(t, a, "fp/short.mlxkv", base[:1000], nil)
	if err := a.ForgeSnap(ctx, "fp/real.mlxkv", "fp/short.mlxkv"); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, "fp/short.mlxkv"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Match(ctx, poolQuery(snapgen.Extend(base[:1200], 50, 7)))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Hit || r.Path != "fp/real.mlxkv" || r.Tokens != 1200 || r.SnapshotTokens != 1500 || !r.Trim {
		t.Fatalf("match = %+v, want real.mlxkv: 1200 of its 1500 tokens, trimmed", r)
	}
}

// TestRepackKeepsSnapRecord: a rewrite moves a snapshot's name to a
// manifest that keeps its snapshot record.
func TestRepackKeepsSnapRecord(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	base := snapgen.Tokens(5000, 3) // about 80 KiB: two 64 KiB chunks
	snapBytes := publishSnap(t, a, "tmp.mlxkv", base, nil)
	if err := a.Remove(ctx, "tmp.mlxkv"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	// x puts the snapshot's first chunk in a pack that x's removal
	// leaves mostly dead.
	b := s.host(t, s.config(t, ""))
	x := append(bytes.Clone(snapBytes[:64<<10]), randBytes(900<<10, 9)...)
	if err := b.Publish(ctx, "x", bytes.NewReader(x), int64(len(x))); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "s.mlxkv", bytes.NewReader(snapBytes), int64(len(snapBytes))); err != nil {
		t.Fatal(err)
	}
	sn, m1, err := b.SnapOf(ctx, "s.mlxkv")
	if err != nil || sn == nil {
		t.Fatalf("no snapshot record at publish: %v", err)
	}
	if err := b.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	st, err := b.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	sn2, m2, err := b.SnapOf(ctx, "s.mlxkv")
	if err != nil {
		t.Fatal(err)
	}
	if m2 == m1 {
		t.Fatalf("s.mlxkv was not moved: %+v", st.Repack)
	}
	if sn2 == nil || sn2.Tokens != sn.Tokens {
		t.Fatalf("the rewrite moved s.mlxkv to a manifest without its snapshot record: %+v", sn2)
	}
	readBack(t, b, "s.mlxkv", snapBytes)
}

// TestDanglingNameDoesNotBlock: a name whose manifest is missing
// (the sweep counts it as dangling) does not keep a collection with a
// rewrite threshold or a capacity from running.
func TestDanglingNameDoesNotBlock(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	x := randBytes(1<<20, 1)
	if err := a.Publish(ctx, "x", bytes.NewReader(x), int64(len(x))); err != nil {
		t.Fatal(err)
	}
	if err := a.PutRawName(ctx, "dangling", strings.Repeat("ab", 32)); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []pool.CollectOptions{
		{Grace: time.Nanosecond, Threshold: 0.5},
		{Grace: time.Nanosecond, Capacity: 1, MinIdle: time.Hour},
	} {
		st, err := a.Collect(ctx, opts)
		if err != nil || st.DanglingNames != 1 {
			t.Fatalf("collect %+v with a dangling name: %+v, %v", opts, st, err)
		}
	}
	readBack(t, a, "x", x)
}

// TestOpenedBeforeRewrite: a host without a cache that opened a name
// before a rewrite, and learned the rewritten manifest of another name
// with the same content after it, reads the first name whole: the chunk
// whose pack went is read where the name now places it.
func TestOpenedBeforeRewrite(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	x := randBytes(900<<10, 11)
	y := randBytes(100<<10, 12) // y shares x's pack, and survives x
	xy := append(bytes.Clone(y), x...)
	if err := a.Publish(ctx, "xy", bytes.NewReader(xy), int64(len(xy))); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		if err := a.Publish(ctx, n, bytes.NewReader(y), int64(len(y))); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Remove(ctx, "xy"); err != nil {
		t.Fatal(err)
	}
	h := s.host(t, s.config(t, ""))
	early, err := h.Open(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.5})
	if err != nil || st.Repack.Names != 2 {
		t.Fatalf("collect: %+v, %v; want both names moved", st, err)
	}
	if _, err := h.Open(ctx, "n1"); err != nil { // learns the new manifest
		t.Fatal(err)
	}
	if _, err := h.Usage(ctx); err != nil { // and the names' again
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(early, 0, early.Size()))
	if err != nil || !bytes.Equal(got, y) {
		t.Fatalf("n2 opened before the rewrite: %v (%d bytes, equal %v)", err, len(got), bytes.Equal(got, y))
	}
}

// TestListLeavesOutBadNames: names written into etcd by hand that no
// publish could make (empty parts, . or ..) are left out of listings
// (kvfs pool ls, a pool mount's directories).
func TestListLeavesOutBadNames(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	data := randBytes(1000, 3)
	if err := a.Publish(ctx, "ok", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	_, m, err := a.SnapOf(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"a//b", "../up", "./x", "d/..", "/abs", ""} {
		if err := a.PutRawName(ctx, bad, m); err != nil {
			t.Fatal(err)
		}
	}
	names, err := a.List(ctx, "")
	if err != nil || len(names) != 1 || names[0] != "ok" {
		t.Fatalf("list: %q, %v; want only ok", names, err)
	}
}
