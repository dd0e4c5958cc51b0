//go:build linux

package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The kernel keeps missing names as negative entries for the mount's
// timeout (fs.Options.Timeout). These tests check that a name appearing
// by any path other than a create through the mount is seen at once, and
// that what does go through the mount is seen by other processes at once.
// Every check runs in a separate process (sh), as another program would.

// lookups is the number of FUSE lookups the daemon has answered.
func lookups(t *testing.T, addr string) uint64 {
	t.Helper()
	return histogram(t, scrape(t, addr), "kvfs_lookup_duration_seconds").GetSampleCount()
}

// missing checks from a separate process that path does not exist.
func missing(t *testing.T, path string) {
	t.Helper()
	sh(t, fmt.Sprintf("test ! -e '%s'", path))
}

// shows checks from separate processes that the mount shows each of
// present and none of missing, after a change through the control socket
// (seenBehindKernel: at once on Linux, within a second simulating macOS).
func shows(t *testing.T, present, missing []string) {
	t.Helper()
	seenBehindKernel(t, func() error {
		for _, p := range present {
			if out, err := shErr(fmt.Sprintf("test -e '%s'", p)); err != nil {
				return fmt.Errorf("%s is not there: %v %s", p, err, out)
			}
		}
		for _, p := range missing {
			if out, err := shErr(fmt.Sprintf("test ! -e '%s'", p)); err != nil {
				return fmt.Errorf("%s is still there: %v %s", p, err, out)
			}
		}
		return nil
	})
}

// present checks from a separate process that path exists.
func present(t *testing.T, path string) {
	t.Helper()
	if out, err := shErr(fmt.Sprintf("test -e '%s'", path)); err != nil {
		t.Fatalf("%s is not there: %v %s", path, err, out)
	}
}

// TestMetaspeedNegativeEntries: a failed lookup is kept by the kernel (a
// second one does not reach the daemon), except for names of 64
// characters, which blocks/<sha256> adoption can make appear; and a name
// that the control socket creates (put, mv) after a failed lookup, in a
// known directory or below a directory that did not exist, is visible at
// once, as is one it removes; in the /.kvfs views too.
func TestMetaspeedNegativeEntries(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	src := filepath.Join(t.TempDir(), "src")
	randFile(t, src, 5000, 1)
	sh(t, "mkdir "+m.path("d"))

	missing(t, m.path("d/x"))
	n := lookups(t, addr)
	missing(t, m.path("d/x"))
	if got := lookups(t, addr); got != n {
		t.Errorf("a second stat of a missing name made %d lookups: the kernel did not keep the negative entry", got-n)
	}
	hexName := m.path("d/" + hex.EncodeToString(make([]byte, 32)))
	missing(t, hexName)
	n = lookups(t, addr)
	missing(t, hexName)
	if got := lookups(t, addr); got == n {
		t.Error("a second stat of a missing 64-character name made no lookup: the kernel keeps it, and would hide an adoptable block")
	}

	// put into a directory the kernel knows.
	kvfs(t, "put", m.store, src, "d/x")
	shows(t, []string{m.path("d/x")}, nil)
	sh(t, fmt.Sprintf("cmp %s %s", src, m.path("d/x")))
	// put below a directory whose lookup failed: the put creates it.
	missing(t, m.path("p"))
	missing(t, m.path("p/q/r"))
	kvfs(t, "put", m.store, src, "p/q/r")
	shows(t, []string{m.path("p/q/r")}, nil)
	// mv onto a name whose lookup failed, and rm.
	missing(t, m.path("d/y"))
	kvfs(t, "mv", m.store, "d/x", "d/y")
	shows(t, []string{m.path("d/y")}, []string{m.path("d/x")})
	kvfs(t, "rm", m.store, "d/y")
	shows(t, nil, []string{m.path("d/y")})
	// And through the mount, which the kernel sees itself.
	sh(t, fmt.Sprintf("cp %s %s", src, m.path("d/x")))
	present(t, m.path("d/x"))
	// The /.kvfs views are not told of new names: a miss there is not
	// kept.
	missing(t, m.path(".kvfs/whole/e"))
	missing(t, m.path(".kvfs/whole/e"))
	sh(t, "mkdir "+m.path("e"))
	present(t, m.path(".kvfs/whole/e"))
}

// TestMetaspeedBlockAdoptAfterMiss: the engine's existence check of
// blocks/<sha256> fails in one namespace, another namespace then writes
// the block (tmp, fsync, rename), and the check finds it at once
// (adoption at lookup); also in a directory that became blocks by a
// rename after the failed check.
func TestMetaspeedBlockAdoptAfterMiss(t *testing.T) {
	m := newMount(t)
	sh(t, fmt.Sprintf("mkdir -p %s %s %s", m.path("a/blocks"), m.path("b/blocks"), m.path("c/x")))
	block := func(seed uint64) (string, string) {
		data := make([]byte, 64<<10)
		rand.NewChaCha8([32]byte{byte(seed)}).Read(data)
		sum := sha256.Sum256(data)
		p := filepath.Join(t.TempDir(), "block")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p, hex.EncodeToString(sum[:])
	}
	write := func(src, h string) {
		dst := m.path("b/blocks/" + h)
		sh(t, fmt.Sprintf("cp %[1]s %[2]s.tmp && sync %[2]s.tmp && mv %[2]s.tmp %[2]s", src, dst))
	}

	src, h := block(1)
	missing(t, m.path("a/blocks/"+h))
	missing(t, m.path("a/blocks/"+h))
	write(src, h)
	present(t, m.path("a/blocks/"+h))
	sh(t, fmt.Sprintf("cmp %s %s", src, m.path("a/blocks/"+h)))

	src, h = block(2)
	missing(t, m.path("c/x/"+h))
	write(src, h)
	sh(t, fmt.Sprintf("mv %s %s", m.path("c/x"), m.path("c/blocks")))
	present(t, m.path("c/blocks/"+h))
	sh(t, fmt.Sprintf("cmp %s %s", src, m.path("c/blocks/"+h)))
}

// TestMetaspeedAcrossProcesses: with entries, attributes and missing names
// kept by the kernel, a rename, unlink, create and chmod by one process is
// what the next process sees.
func TestMetaspeedAcrossProcesses(t *testing.T) {
	m := newMount(t)
	f, g, h := m.path("f"), m.path("g"), m.path("h")
	sh(t, "echo one > "+f)
	present(t, f)
	missing(t, g)
	sh(t, fmt.Sprintf("mv %s %s", f, g))
	missing(t, f)
	present(t, g)
	if mode := sh(t, "stat -c %a "+g); mode != "644\n" {
		t.Fatalf("mode %q", mode)
	}
	sh(t, "chmod 600 "+g)
	if mode := sh(t, "stat -c %a "+g); mode != "600\n" {
		t.Errorf("after chmod 600, mode %q", mode)
	}
	missing(t, h)
	sh(t, "echo two > "+h)
	present(t, h)
	sh(t, "rm "+g)
	missing(t, g)
	sh(t, fmt.Sprintf("mv %s %s", h, f))
	present(t, f)
	missing(t, h)
}

// TestMetaspeedReadCloseNoFlush: closing a read-only descriptor sends the
// daemon nothing (FOPEN_NOFLUSH), while closing a written one still
// flushes, which commits the file for the next reader.
func TestMetaspeedReadCloseNoFlush(t *testing.T) {
	m := newMount(t, "--debug-fuse", "--log-level", "debug")
	log := filepath.Join(m.store, "kvfs.log")
	flushes := func() int {
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), ": FLUSH ")
	}
	f := m.path("f")
	sh(t, "echo one > "+f)
	n := flushes()
	if n == 0 {
		t.Fatal("no FLUSH in the daemon's debug log: the test cannot count them")
	}
	for range 3 {
		if got := sh(t, "cat "+f); got != "one\n" {
			t.Fatalf("read %q", got)
		}
	}
	if got := flushes(); simulatingDarwin() {
		// FUSE 7.19 (macFUSE) has no FOPEN_NOFLUSH: every close flushes.
		if got-n != 3 {
			t.Errorf("simulating macOS, 3 read-only opens and closes sent %d FLUSH requests, want 3", got-n)
		}
	} else if got != n {
		t.Errorf("3 read-only opens and closes sent %d FLUSH requests, want none", got-n)
	}
	sh(t, "echo two > "+f)
	if got := flushes(); got == n {
		t.Error("closing a written file sent no FLUSH")
	}
	if got := sh(t, "cat "+f); got != "two\n" {
		t.Fatalf("after the write, read %q", got)
	}
}

// TestMetaspeedRenameTargetNotAdopted: in the engine's blocks protocol,
// the lookups of blocks/<h> that the rename of <h>.tmp makes (mv's stat,
// the kernel's lookup of the target) find nothing: the block being
// written there is not adopted under its final name (a synced write
// transaction at every block) only for the rename to replace it. The
// block then reads back, and another namespace still adopts it.
func TestMetaspeedRenameTargetNotAdopted(t *testing.T) {
	m := newMount(t, "--debug-fuse", "--log-level", "debug")
	data := make([]byte, 64<<10)
	rand.NewChaCha8([32]byte{9}).Read(data)
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	src := filepath.Join(t.TempDir(), "block")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, fmt.Sprintf("mkdir -p %s %s", m.path("ns/blocks"), m.path("other/blocks")))
	dst := m.path("ns/blocks/" + h)
	sh(t, fmt.Sprintf("test ! -e %[2]s && cp %[1]s %[2]s.tmp && sync %[2]s.tmp && mv %[2]s.tmp %[2]s", src, dst))

	// The daemon's replies to the lookups of h, up to the rename.
	b, err := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	lookups := map[string]bool{} // request id → a lookup of h
	var replies []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, ": RENAME ") {
			break
		}
		if i := strings.Index(l, "rx "); i >= 0 && strings.Contains(l, ": LOOKUP ") && strings.Contains(l, `\"`+h+`\"`) {
			lookups[strings.Fields(l[i+3:])[0]] = true
		}
		if i := strings.Index(l, "tx "); i >= 0 {
			id := strings.Fields(l[i+3:])[0]
			if lookups[id] {
				replies = append(replies, strings.TrimSpace(l[i+3+len(id):]))
			}
		}
	}
	if len(replies) < 2 {
		t.Fatalf("found %d replies to lookups of the block before the rename in the debug log, want the existence check's and the rename's: %q", len(replies), replies)
	}
	for _, r := range replies {
		if !strings.Contains(r, "no such file") {
			t.Errorf("a lookup of blocks/<h> before the rename found it (adopted the block being written): %s", r)
		}
	}
	sh(t, fmt.Sprintf("cmp %s %s", src, dst))
	sh(t, fmt.Sprintf("cmp %s %s", src, m.path("other/blocks/"+h)))
}
