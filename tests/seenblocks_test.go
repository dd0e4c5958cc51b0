//go:build linux

package tests

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/mlx"
)

// Seen means kept (docs/DESIGN.md, "Invariants"): the engine checks whether
// each block exists, skips those that do, writes the others and commits
// its manifest last (FORMAT.md §4.3). A block it found existing must not
// be removed before that manifest commits: not by capacity eviction, not
// by the release of the last manifest that listed it, not by a collect in
// another process. Each test runs the engine's protocol in its own process
// (engineturn), stopped between its checks and its manifest while the
// test evicts, releases or collects, then restores the snapshot.

const seenFixtures = "../mlx/testdata/mlxbun/blocks/fixture-fingerprint/base"

func seenManifest(T string) string {
	return filepath.Join(seenFixtures, "00000000-0000-4000-8000-000000000"+T+".mlxkv")
}

func init() {
	// engineturn SRC DIR T: write the fixture snapshot of T tokens from
	// SRC into DIR as the engine does: every block that does not exist
	// (tmp, fsync, rename), then print "checked reused=N", wait for a
	// line on stdin, and commit the manifest (tmp, fsync, rename).
	clients["engineturn"] = func(args []string) error {
		src, dir, T := args[0], args[1], args[2]
		snap, err := mlx.ReadFile(seenManifest(T))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "blocks"), 0o700); err != nil {
			return err
		}
		reused := 0
		for _, sl := range snap.Header.Slots() {
			for _, b := range sl.Blocks {
				p := filepath.Join(dir, "blocks", b.Hash)
				listing()
				if _, err := os.Stat(p); err == nil {
					reused++
					continue
				}
				data, err := os.ReadFile(filepath.Join(src, "blocks", b.Hash))
				if err != nil {
					return err
				}
				if err := engineWriteFile(p, data); err != nil {
					return err
				}
			}
		}
		fmt.Printf("checked reused=%d\n", reused)
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("wait for the commit: %w", err)
		}
		data, err := os.ReadFile(seenManifest(T))
		if err != nil {
			return err
		}
		if err := engineWriteFile(filepath.Join(dir, T+".mlxkv"), data); err != nil {
			return err
		}
		fmt.Println("committed")
		return nil
	}
}

// listing runs before each of engineturn's existence checks (engineturnls).
var listing = func() {}

// engineWriteFile writes data to path as the engine does: path.tmp (0600,
// truncated), fsync, close, rename.
func engineWriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// engineTurn is a running engineturn client, stopped before its manifest.
type engineTurn struct {
	t      *testing.T
	stdin  io.WriteCloser
	out    *bufio.Reader
	wait   func() error
	Reused int
}

func startEngineTurn(t *testing.T, dir, T string) *engineTurn {
	t.Helper()
	return startEngineTurnAs(t, "engineturn", dir, T)
}

// startEngineTurnAs is startEngineTurn with the client named name.
func startEngineTurnAs(t *testing.T, name, dir, T string) *engineTurn {
	t.Helper()
	cmd := client(name, seenFixtures, dir, T)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &engineTurn{t: t, stdin: stdin, out: bufio.NewReader(out), wait: cmd.Wait}
	t.Cleanup(func() {
		if e.stdin != nil {
			e.stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, _ := e.out.ReadString('\n')
	if _, err := fmt.Sscanf(line, "checked reused=%d", &e.Reused); err != nil {
		t.Fatalf("engine turn %s in %s: %q", T, dir, line)
	}
	return e
}

// commit lets the engine write its manifest and waits for it.
func (e *engineTurn) commit() {
	e.t.Helper()
	fmt.Fprintln(e.stdin, "go")
	line, _ := e.out.ReadString('\n')
	e.stdin.Close()
	e.stdin = nil
	if err := e.wait(); err != nil || strings.TrimSpace(line) != "committed" {
		e.t.Fatalf("engine manifest commit: %v, %q", err, line)
	}
}

// evictAll sets the capacity to one byte until the evictor has removed
// want files, checks it removes no more, and lifts the capacity again.
func evictAll(t *testing.T, m *mount, want int) {
	t.Helper()
	before := readCapStats(t, m).Evictions.Files
	kvfs(t, "config", m.store, "capacity=1")
	st := waitEvicted(t, m, int(before)+want)
	time.Sleep(300 * time.Millisecond) // more passes, at 100 ms each
	st = readCapStats(t, m)
	kvfs(t, "config", m.store, "capacity=0")
	if got := st.Evictions.Files - before; got != int64(want) {
		t.Fatalf("evicted %d files, want %d:\n%s", got, want, strings.Join(evictedOrder(t, m), "\n"))
	}
}

// restoreOK checks that the snapshot of T tokens in dir restores: every
// block it lists reads back with its hash (kvfs inspect --verify, a
// separate process reading through the mount).
func restoreOK(t *testing.T, dir, T string) {
	t.Helper()
	out := kvfs(t, "inspect", "--verify", filepath.Join(dir, T+".mlxkv"))
	if !strings.Contains(out, "verify:       ok") {
		t.Fatalf("restore of %s/%s.mlxkv:\n%s", dir, T, out)
	}
}

// seenGrace is the blob grace of seenMount's mounts: what keeps a block
// turn 2 saw is its sighting, for this long, so turn 2's check, the
// eviction and the lifting of the capacity must fit in it (inGrace). 2 s
// did not, once, on a loaded machine: more blocks went after the count.
const seenGrace = 6 * time.Second

// inGrace fails the test if more than seenGrace passed since start (turn
// 2's check): blocks seen then may go after it, as they should, so the
// test would prove nothing.
func inGrace(t *testing.T, start time.Time) {
	t.Helper()
	if d := time.Since(start); d > seenGrace {
		t.Fatalf("turn 2's check and the eviction took %v, past the %v grace that keeps what it saw: the machine is too slow for this test", d.Round(time.Millisecond), seenGrace)
	}
}

// seenMount mounts a store with a short grace period and waits until the
// blocks of turn 1 (300 tokens), written and then dropped or kept as
// keep300 says, and their last sighting are older than it: only turn 2's
// check can keep them.
func seenMount(t *testing.T, keep300 bool) (*mount, string) {
	t.Helper()
	grace := seenGrace
	m := newMount(t, "--blob-grace", grace.String(), "--evict-interval", "100ms")
	ns := m.path("fp/conv")
	startEngineTurn(t, ns, "300").commit()
	if !keep300 {
		if err := os.Remove(filepath.Join(ns, "300.mlxkv")); err != nil {
			t.Fatal(err)
		}
	}
	// Every block looked up now: an entry the kernel may keep. It must
	// not keep it past the grace (blocks' entries are cached briefly),
	// or turn 2's check would not reach the daemon.
	sh(t, fmt.Sprintf("stat %s/blocks/* >/dev/null", ns))
	time.Sleep(grace + 1500*time.Millisecond)
	return m, ns
}

// TestSeenBlocksSurviveEviction: turn 1 was dropped; turn 2 finds 64 of its
// blocks and skips them; eviction at capacity runs before turn 2's
// manifest commits. The 32 blocks nobody saw go; the snapshot restores.
func TestSeenBlocksSurviveEviction(t *testing.T) {
	m, ns := seenMount(t, false)
	start := time.Now()
	e := startEngineTurn(t, ns, "400")
	if e.Reused != 64 {
		t.Fatalf("turn 2 found %d blocks existing, want 64", e.Reused)
	}
	evictAll(t, m, 32)
	inGrace(t, start)
	e.commit()
	restoreOK(t, ns, "400")
}

// TestSeenBlocksSurviveRelease: turn 1's manifest still lists the blocks
// when turn 2 checks them, and is removed (superseded) before turn 2
// commits, with eviction in between.
func TestSeenBlocksSurviveRelease(t *testing.T) {
	m, ns := seenMount(t, true)
	start := time.Now()
	e := startEngineTurn(t, ns, "400")
	if e.Reused != 64 {
		t.Fatalf("turn 2 found %d blocks existing, want 64", e.Reused)
	}
	if err := os.Remove(filepath.Join(ns, "300.mlxkv")); err != nil {
		t.Fatal(err)
	}
	evictAll(t, m, 32)
	inGrace(t, start)
	e.commit()
	restoreOK(t, ns, "400")
}

// TestSeenBlocksSurviveCollect: a collect in another process removes every
// block that no manifest lists (turn 2's included, its manifest not yet
// there), then eviction runs: nothing it could take is named any more, and
// the snapshot restores from the blocks' content, which the grace keeps.
func TestSeenBlocksSurviveCollect(t *testing.T) {
	m, ns := seenMount(t, false)
	start := time.Now()
	e := startEngineTurn(t, ns, "400")
	if e.Reused != 64 {
		t.Fatalf("turn 2 found %d blocks existing, want 64", e.Reused)
	}
	sh(t, fmt.Sprintf("rm %s/blocks/*", ns)) // no *.mlxkv lists any
	evictAll(t, m, 0)
	inGrace(t, start)
	e.commit()
	restoreOK(t, ns, "400")
}
