//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// TestLlamaStateHashedWhileWritten: a llama.cpp state file written in
// order through the mount, in writes of random sizes, is hashed as it is
// written, its blocks found header by header and its parent from its head
// (issue 29: its commit used to hash it all), with flash attention and
// with V transposed; one written out of order is hashed by its commit.
// Every file reads back exact, also after a remount, the rows they share
// are stored once, and the store checks clean (newMount's cleanup).
func TestLlamaStateHashedWhileWritten(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	hashed := func() float64 { return chunkSumHashed(t, addr) }
	r := rand.New(rand.NewPCG(29, 7))
	tokens := make([]uint32, 2400)
	for i := range tokens {
		tokens[i] = r.Uint32N(32000)
	}
	branch := append(append([]uint32(nil), tokens[:1500]...), 7, 8, 9, 10, 11, 12, 13, 14)
	files := map[string][]byte{}
	var inOrderBytes int64
	h0 := hashed()
	for _, fa := range []bool{true, false} {
		spec := llamastatetest.Spec{Layers: 4, KRow: 1024, FlashAttn: fa, VEl: 2, VChannels: 512}
		for i, tk := range [][]uint32{tokens[:1200], tokens[:1800], tokens, branch} {
			name := fmt.Sprintf("slot-fa%v-%d.bin", fa, i)
			b := llamastatetest.Write(spec, tk)
			files[name] = b
			inOrderBytes += int64(len(b))
			writeInPieces(t, m.path(name), b, r, inOrder)
		}
	}
	h1 := hashed()
	other := llamastatetest.Write(llamastatetest.Spec{Layers: 4, KRow: 1024, FlashAttn: true}, tokens[:2000])
	files["rewritten.bin"] = other
	writeInPieces(t, m.path("rewritten.bin"), other, r, rewritten)
	h2 := hashed()
	t.Logf("commits hashed %g of %d bytes written in order, %g of %d rewritten", h1-h0, inOrderBytes, h2-h1, len(other))
	// With the kernel's writeback cache, writes may come out of order.
	if !strings.Contains(os.Getenv("KVFS_TEST_MOUNT_ARGS"), "writeback") && h1-h0 > float64(inOrderBytes)/10 {
		t.Errorf("the commits of llama.cpp files written in order hashed %g of their %d bytes, want nearly none", h1-h0, inOrderBytes)
	}
	if h2-h1 < float64(len(other))/2 {
		t.Errorf("the commit of a file rewritten out of order hashed %g of its %d bytes: sums taken from out-of-order writes", h2-h1, len(other))
	}
	if st := mountStats(t, m); st.StoredBytes*2 > st.LogicalBytes {
		t.Errorf("stored %d bytes of %d: the files' rows did not dedup", st.StoredBytes, st.LogicalBytes)
	}
	check := func(when string) {
		t.Helper()
		for name, want := range files {
			got, err := os.ReadFile(m.path(name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %s reads back wrong (%v)", when, name, err)
			}
		}
	}
	check("mounted")
	remount(t, m, "--metrics", freeAddr(t))
	check("after a remount")

}
