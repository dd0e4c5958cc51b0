//go:build linux

package tests

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
)

// TestSnapshotHashedWhileWritten: whole-layout snapshots written through
// the mount in order, by cp and as the engine writes them (NAME.tmp in
// pieces of any size, fsync, rename; also a hole at the start written
// last, as the engine's header), are hashed chunk by chunk as they are
// written: their commits hash nothing (the daemon's metrics), the second
// one reusing the rows of the first as its parent. One written out of
// order (bytes written again after the writes passed them) is hashed by
// its commit, as before. Every snapshot reads back
// byte for byte and verifies (kvfs inspect --verify), before and after a
// remount.
func TestSnapshotHashedWhileWritten(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	dir := t.TempDir()
	ns := m.path("fp/base")
	if err := os.MkdirAll(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	base := snapgen.Tokens(300, 1)
	files := map[string][]byte{}
	gen := func(name string, tokens []uint32) []byte {
		p := filepath.Join(dir, name)
		if err := snapgen.Llama3_8B.WriteFile(p, tokens); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
		return b
	}
	a := gen("a.mlxkv", base)
	b := gen("b.mlxkv", snapgen.Extend(base, 500, 2))
	c := gen("c.mlxkv", snapgen.Tokens(400, 3))
	d := gen("d.mlxkv", snapgen.Tokens(350, 4))

	hashed := func() float64 { return chunkSumHashed(t, addr) }
	h0 := hashed()
	sh(t, "cp "+filepath.Join(dir, "a.mlxkv")+" "+filepath.Join(ns, "a.mlxkv"))
	writeInPieces(t, filepath.Join(ns, "b.mlxkv"), b, rand.New(rand.NewPCG(1, 1)), inOrder)
	writeInPieces(t, filepath.Join(ns, "d.mlxkv"), d, rand.New(rand.NewPCG(3, 3)), holeFirst)
	h1 := hashed()
	writeInPieces(t, filepath.Join(ns, "c.mlxkv"), c, rand.New(rand.NewPCG(2, 2)), rewritten)
	h2 := hashed()
	t.Logf("commits hashed %g bytes of snapshots written in order (%d bytes), %g of one written out of order (%d bytes)",
		h1-h0, len(a)+len(b)+len(d), h2-h1, len(c))
	// Pieces that find the hasher's queue full (a loaded machine) are left
	// to the commit; with the kernel's writeback cache, writes may come
	// out of order.
	if !strings.Contains(os.Getenv("KVFS_TEST_MOUNT_ARGS"), "writeback") && h1-h0 > float64(len(a)+len(b)+len(d))/4 {
		t.Errorf("the commits of snapshots written in order hashed %g of their %d bytes, want nearly none", h1-h0, len(a)+len(b)+len(d))
	}
	if h2-h1 < float64(len(c))/2 {
		t.Errorf("the commit of a snapshot written out of order hashed %g of its %d bytes: sums taken from out-of-order writes", h2-h1, len(c))
	}
	check := func(when string) {
		t.Helper()
		for name, want := range files {
			p := filepath.Join(ns, name)
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: %s: %d bytes differ from the %d written", when, name, len(got), len(want))
			}
			if out := kvfs(t, "inspect", "--verify", p); !strings.Contains(out, "verify:       ok") {
				t.Fatalf("%s: %s does not verify:\n%s", when, name, out)
			}
		}
	}
	check("mounted")
	remount(t, m, "--metrics", freeAddr(t))
	check("after a remount")
}

// writeOrder is the order writeInPieces writes in.
type writeOrder int

const (
	inOrder   writeOrder = iota
	holeFirst            // the second half, then the first: as the engine writes its header last
	rewritten            // holeFirst, then part of the second half again (out of order)
)

// writeInPieces writes data to p.tmp as the engine writes a snapshot, in
// pieces of random sizes in the given order, fsyncs it and renames it to
// p.
func writeInPieces(t *testing.T, p string, data []byte, r *rand.Rand, order writeOrder) {
	t.Helper()
	f, err := os.OpenFile(p+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	write := func(from, to int) {
		for off := from; off < to; {
			n := min(to-off, 1+r.IntN(3<<20))
			if _, err := f.WriteAt(data[off:off+n], int64(off)); err != nil {
				t.Fatal(err)
			}
			off += n
		}
	}
	switch order {
	case holeFirst:
		write(len(data)/2, len(data))
		write(0, len(data)/2)
	case rewritten:
		write(len(data)/2, len(data))
		write(0, len(data)/2)
		write(len(data)/2, len(data)/2+3<<20) // the same bytes again, once the plan is made
	default:
		write(0, len(data))
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}
