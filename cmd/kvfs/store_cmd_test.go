package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/store"
)

var whole400 = filepath.Join(fixtures, "whole/fixture-fingerprint/base/00000000-0000-4000-8000-000000000400.mlxkv")

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(args...)
	if code != exitOK {
		t.Fatalf("kvfs %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

func TestStoreCommands(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	mustRun(t, "init", "--chunk-size", "16KiB", st)
	out := mustRun(t, "put", st, whole300, "fp/base/300.mlxkv")
	if !strings.Contains(out, "as mlxkv") {
		t.Fatalf("put: %s", out)
	}
	out = mustRun(t, "put", st, whole400, "fp/base/400.mlxkv")
	if !strings.Contains(out, "1.2 MiB reused") {
		t.Fatalf("second put did not reuse the parent's rows: %s", out)
	}
	if out := mustRun(t, "ls", st); out != "fp/\n" {
		t.Fatalf("ls: %q", out)
	}
	out = mustRun(t, "ls", "-l", st, "fp/base")
	if !strings.Contains(out, "1654784") || !strings.Contains(out, "mlxkv 400.mlxkv") {
		t.Fatalf("ls -l: %s", out)
	}
	var stats store.Stats
	if err := json.Unmarshal([]byte(mustRun(t, "stats", "--json", st)), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Files != 2 || stats.LogicalBytes != 1257472+1654784 || stats.DedupRatio < 1.7 || stats.ChunkSize != 16384 {
		t.Fatalf("stats %+v", stats)
	}
	if out := mustRun(t, "stats", st); !strings.Contains(out, "dedup ratio:") {
		t.Fatalf("stats: %s", out)
	}
	got := filepath.Join(dir, "out.mlxkv")
	mustRun(t, "get", "--verify", st, "fp/base/400.mlxkv", got)
	a, _ := os.ReadFile(got)
	b, _ := os.ReadFile(whole400)
	if !bytes.Equal(a, b) {
		t.Fatal("get returned different bytes")
	}
	if out := mustRun(t, "get", st, "fp/base/300.mlxkv", "-"); out != string(mustRead(t, whole300)) {
		t.Fatal("get to stdout returned different bytes")
	}
	mustRun(t, "mv", st, "fp/base/400.mlxkv", "fp/400.mlxkv")
	mustRun(t, "rm", st, "fp/base/300.mlxkv", "fp/base")
	if out := mustRun(t, "ls", st, "fp"); out != "400.mlxkv\n" {
		t.Fatalf("after mv and rm: %q", out)
	}
	s, err := store.Open(st, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(t.Context(), store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPutGetIntoDirectory: as cp does, put and get given a directory (or a
// name ending in /) put the file inside it under its own name; a get into
// a directory that does not exist says so.
func TestPutGetIntoDirectory(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	mustRun(t, "init", st)
	mustRun(t, "put", st, whole300, "snaps/")
	mustRun(t, "put", st, whole400, "snaps")
	if out := mustRun(t, "ls", st, "snaps"); out != filepath.Base(whole300)+"\n"+filepath.Base(whole400)+"\n" && out != filepath.Base(whole400)+"\n"+filepath.Base(whole300)+"\n" {
		t.Fatalf("ls snaps: %q", out)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	mustRun(t, "get", st, "snaps/"+filepath.Base(whole300), out)
	mustRun(t, "get", st, "snaps/"+filepath.Base(whole400), out+"/")
	for _, f := range []string{whole300, whole400} {
		a, _ := os.ReadFile(filepath.Join(out, filepath.Base(f)))
		b, _ := os.ReadFile(f)
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("get into %s: %s differs", out, filepath.Base(f))
		}
	}
	code, _, errOut := runCmd("get", st, "snaps/"+filepath.Base(whole300), filepath.Join(dir, "none")+"/")
	if code != exitFailure || !strings.Contains(errOut, "directory "+filepath.Join(dir, "none")+"/") {
		t.Fatalf("get into a missing directory: exit %d: %s", code, errOut)
	}
}

func TestStoreCommandErrors(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	mustRun(t, "init", st)
	mustRun(t, "put", st, whole300, "a")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", st}, exitFailure, "a store already exists at " + st},
		{[]string{"init", "--chunk-size", "12", filepath.Join(dir, "x")}, exitUsage, "--chunk-size 12 B: want 4KiB to 64MiB"},
		{[]string{"init", "--chunk-size", "128MiB", filepath.Join(dir, "x")}, exitUsage, "want 4KiB to 64MiB"},
		{[]string{"init", "--chunk-size", "64.0 KiB", filepath.Join(dir, "k64")}, exitOK, "chunk size 64.0 KiB"},
		{[]string{"init", "--chunk-size", "1m", filepath.Join(dir, "m1")}, exitOK, "chunk size 1.0 MiB"},
		{[]string{"init", "--chunk-size", "lots", filepath.Join(dir, "x")}, exitUsage, "want a number"},
		{[]string{"ls", filepath.Join(dir, "nostore")}, exitFailure, filepath.Join(dir, "nostore") + " is not a kvfs store (create one with: kvfs init " + filepath.Join(dir, "nostore") + ")"},
		{[]string{"stats", filepath.Join(dir, "nostore")}, exitFailure, "is not a kvfs store (create one with: kvfs init"},
		{[]string{"gc", filepath.Join(dir, "nostore")}, exitFailure, "is not a kvfs store (create one with: kvfs init"},
		{[]string{"fsck", filepath.Join(dir, "nostore")}, 8, "is not a kvfs store (create one with: kvfs init"},
		{[]string{"config", filepath.Join(dir, "nostore")}, exitFailure, "is not a kvfs store (create one with: kvfs init"},
		{[]string{"put", st, filepath.Join(dir, "missing"), "b"}, exitFailure, "no such file"},
		{[]string{"put", st, dir, "b"}, exitFailure, "not a regular file"},
		{[]string{"put", st, whole300, "a/b"}, exitFailure, "not a directory"},
		{[]string{"put", st, whole300, "../escape"}, exitFailure, "not allowed"},
		{[]string{"get", st, "missing", filepath.Join(dir, "o")}, exitFailure, "open missing: file does not exist"},
		{[]string{"get", st, "a", filepath.Join(dir, "nodir", "o")}, exitFailure, "get a: write " + filepath.Join(dir, "nodir", "o") + ": no such file or directory (the directory " + filepath.Join(dir, "nodir") + " does not exist)"},
		{[]string{"rm", st, "missing"}, exitFailure, "remove missing"},
		{[]string{"mv", st, "missing", "x"}, exitFailure, "rename missing"},
		{[]string{"put", st, whole300}, exitUsage, "want STORE SRC DEST"},
	} {
		code, out, errOut := runCmd(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("kvfs %v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", c.args, code, c.code, c.want, out, errOut)
		}
	}
}

func TestGetCorruptExit3(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	mustRun(t, "init", "--chunk-size", "16KiB", st)
	mustRun(t, "put", st, whole300, "a")
	packs, _ := filepath.Glob(filepath.Join(st, "packs", "*.pack"))
	raw := mustRead(t, packs[0])
	raw[100] ^= 1
	os.WriteFile(packs[0], raw, 0o600)
	code, _, errOut := runCmd("get", "--verify", st, "a", filepath.Join(dir, "o"))
	if code != exitCorrupt || !strings.Contains(errOut, "chunk corrupt") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "o")); !os.IsNotExist(err) {
		t.Fatal("a failed get left its output")
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, label: "put", on: true}
	p.update(50<<20, 100<<20)
	p.update(60<<20, 100<<20) // within 100 ms: not redrawn
	p.update(100<<20, 100<<20)
	p.done()
	out := buf.String()
	if strings.Count(out, "\r") != 2 || !strings.Contains(out, " 50.0% 50.0 MiB / 100.0 MiB") || !strings.Contains(out, "100.0%") || !strings.HasSuffix(out, "\n") {
		t.Fatalf("progress output %q", out)
	}
	// Whole again, later: the bytes are sent and the daemon stores them
	// (kvfs put through the socket): the bar says so instead of sitting
	// at 100%.
	buf.Reset()
	p.update(100<<20, 100<<20)
	if out := buf.String(); !strings.Contains(out, "put: 100.0 MiB sent, storing (") {
		t.Fatalf("progress while the daemon stores: %q", out)
	}
	var quiet bytes.Buffer
	q := newProgress(&quiet, "get", progressMinBytes, 1<<30) // not a terminal
	q.update(1, 2)
	q.done()
	if quiet.Len() != 0 {
		t.Fatalf("progress drawn on a non-terminal: %q", quiet.String())
	}
}

func TestMountUsageErrors(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "store")
	mustRun(t, "init", st)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"mount", filepath.Join(dir, "nostore"), dir}, exitFailure, "is not a kvfs store (create one with: kvfs init"},
		{[]string{"mount", st, filepath.Join(dir, "missing")}, exitFailure, "mount point"},
		{[]string{"mount", st, filepath.Join(st, "kvfs.db")}, exitFailure, "is not a directory"},
		{[]string{"mount", st}, exitUsage, "want STORE MOUNTPOINT"},
		{[]string{"mount", "-o", "bogus", st, dir}, exitUsage, `unknown mount option "bogus"`},
		{[]string{"mount", "--log-level", "loud", st, dir}, exitUsage, "--log-level"},
		{[]string{"unmount"}, exitUsage, "want MOUNTPOINT"},
	} {
		code, out, errOut := runCmd(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("kvfs %v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", c.args, code, c.code, c.want, out, errOut)
		}
	}
}

// TestStatsExplainsDeadBytes: once a store has dead bytes (a file
// replaced), kvfs stats says what they are and what reclaims them.
func TestStatsExplainsDeadBytes(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", st)
	if out := mustRun(t, "stats", st); strings.Contains(out, "(dead:") {
		t.Fatalf("a fresh store explains dead bytes it has not:\n%s", out)
	}
	mustRun(t, "put", st, whole300, "a")
	mustRun(t, "put", st, whole400, "a")
	if out := mustRun(t, "stats", st); !strings.Contains(out, "(dead: pack bytes no chunk uses") || !strings.Contains(out, "kvfs gc") {
		t.Fatalf("stats after a replacement:\n%s", out)
	}
}
