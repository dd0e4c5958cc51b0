//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestContentCutThroughMount: files of no format the store parses,
// written through the mount, are cut by their content: copies shifted by
// a few bytes dedup (issue 29), a file written in order is hashed as it
// is written (its commit hashes little of it) and one rewritten out of
// order is hashed by its commit; every file reads back exact, also after
// a remount, and the store checks clean.
func TestContentCutThroughMount(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	r := rand.New(rand.NewPCG(29, 5))
	base := make([]byte, 24<<20+12345)
	for i := range base {
		base[i] = byte(r.Uint32())
	}
	files := map[string][]byte{}
	hashed := func() float64 { return chunkSumHashed(t, addr) }
	h0 := hashed()
	for i, ins := range []int{0, 3, 1000} {
		b := append(bytes.Repeat([]byte{byte(i + 1)}, ins), base...)
		name := []string{"page.bin", "shifted.bin", "checkpoint.pt"}[i]
		files[name] = b
		writeInPieces(t, m.path(name), b, r, inOrder)
	}
	h1 := hashed()
	other := append([]byte("x"), base[:8<<20]...)
	files["rewritten.bin"] = other
	writeInPieces(t, m.path("rewritten.bin"), other, r, rewritten)
	h2 := hashed()
	written := float64(3*len(base) + 1003)
	t.Logf("commits hashed %g of %g bytes written in order, %g of %d rewritten", h1-h0, written, h2-h1, len(other))
	if !strings.Contains(os.Getenv("KVFS_TEST_MOUNT_ARGS"), "writeback") && h1-h0 > written/4 {
		t.Errorf("the commits of files written in order hashed %g of their %g bytes, want a small part", h1-h0, written)
	}
	if h2-h1 < float64(len(other))/2 {
		t.Errorf("the commit of a file rewritten out of order hashed %g of its %d bytes: sums taken from out-of-order writes", h2-h1, len(other))
	}
	st := mountStats(t, m)
	if ratio := float64(st.StoredBytes) / float64(len(base)); ratio > 1.1 {
		t.Errorf("three shifted copies and a part stored %.3f× one copy, want at most 1.1×", ratio)
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
	kvfs(t, "unmount", m.mnt)
	m.check(t)
	m.start(t, "--metrics", addr)
	check("after a remount")

	// chunking=fixed, set through the daemon, cuts new files every C
	// bytes: a copy shifted by a byte then shares nothing.
	if out := kvfs(t, "config", m.store, "chunking=fixed"); !strings.Contains(out, "chunking=fixed") {
		t.Fatalf("config: %s", out)
	}
	before := storedBytes(t, m)
	part := base[:4<<20]
	for i, b := range [][]byte{append([]byte("a"), part...), append([]byte("bc"), part...)} {
		if err := os.WriteFile(m.path(fmt.Sprintf("fixed-%d", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if grew := storedBytes(t, m) - before; grew < 2*int64(len(part))-(1<<20) {
		t.Fatalf("with chunking=fixed two shifted copies stored %d bytes, want about two copies", grew)
	}
	if out, err := exec.Command(kvfsBin, "config", m.store, "chunking=sometimes").CombinedOutput(); err == nil || !strings.Contains(string(out), "chunking=sometimes") {
		t.Fatalf("a bad chunking setting: %v %s", err, out)
	}
}

// TestHolesThroughMount: holes in new files of no parsed format (a
// truncate that grows an empty file, a write past a hole of 10 GiB) are
// zero runs, never read, cut or hashed (red team: 27 s and an EIO past
// 120 GiB when they were); the files read back and keep their sizes
// across a remount.
func TestHolesThroughMount(t *testing.T) {
	m := newMount(t)
	sh(t, "touch "+m.path("grown")+" && truncate -s 8G "+m.path("grown"))
	f, err := os.OpenFile(m.path("past"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Repeat([]byte("head"), 25)
	tail := []byte("tail past ten GiB")
	if _, err := f.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(tail, 10<<30); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st := mountStats(t, m)
	if st.ZeroBytes < 18<<30-1<<20 || st.StoredBytes > 1<<20 {
		t.Fatalf("stats %+v: want the holes as zero runs", st)
	}
	check := func(when string) {
		t.Helper()
		for p, want := range map[string]int64{"grown": 8 << 30, "past": 10<<30 + int64(len(tail))} {
			fi, err := os.Stat(m.path(p))
			if err != nil || fi.Size() != want {
				t.Fatalf("%s: %s: %v, size %v, want %d", when, p, err, fi, want)
			}
		}
		f, err := os.Open(m.path("past"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got := make([]byte, len(tail))
		zeros := make([]byte, 4096)
		if _, err := f.ReadAt(got, 10<<30); err != nil || !bytes.Equal(got, tail) {
			t.Fatalf("%s: the tail past the hole: %q, %v", when, got, err)
		}
		if _, err := f.ReadAt(zeros, 5<<30+77); err != nil || !bytes.Equal(zeros, make([]byte, 4096)) {
			t.Fatalf("%s: the hole does not read as zeros (%v)", when, err)
		}
		got = make([]byte, len(head))
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, head) {
			t.Fatalf("%s: the head: %v", when, err)
		}
	}
	check("mounted")
	kvfs(t, "unmount", m.mnt)
	m.check(t)
	m.start(t)
	check("after a remount")
}
