package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLsLongHuman: kvfs ls -lh prints sizes as ls -lh does (-h printed
// the help), and no line of ls -l starts with a space.
func TestLsLongHuman(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", st)
	mustRun(t, "put", st, whole300, "d/a.mlxkv")
	for _, args := range [][]string{{"ls", "-l", st}, {"ls", "-l", st, "d"}, {"ls", "-lh", st, "d"}} {
		out := mustRun(t, args...)
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if !strings.HasPrefix(l, "d") && !strings.HasPrefix(l, "-") {
				t.Errorf("kvfs %v: line %q does not start with the mode", args, l)
			}
		}
	}
	if out := mustRun(t, "ls", "-lh", st, "d"); !strings.Contains(out, " 1.2M ") || strings.Contains(out, "1257472") || strings.Contains(out, "Usage") {
		t.Errorf("ls -lh: %q", out)
	}
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1.0K", 1257472: "1.2M", 10 << 20: "10M", 1<<30 - 1: "1.0G", 65 << 10: "65K"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStatsWords: kvfs stats says "1 directory", and an empty store's
// dedup ratio is none, not "0.00x".
func TestStatsWords(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", st)
	out := mustRun(t, "stats", st)
	if !strings.Contains(out, "files:         0 in 1 directory\n") || !strings.Contains(out, "dedup ratio:   — (nothing stored)\n") {
		t.Errorf("stats of an empty store:\n%s", out)
	}
	mustRun(t, "put", st, whole300, "d/a.mlxkv")
	out = mustRun(t, "stats", st)
	if !strings.Contains(out, "files:         1 in 2 directories\n") || !strings.Contains(out, "dedup ratio:   1.02x\n") {
		t.Errorf("stats of a store with a file:\n%s", out)
	}
}

// TestProgressAbove: output written while a progress bar is drawn (fsck
// --verify's result on a terminal that also shows the bar) starts a line
// of its own; it was printed on the bar's line.
func TestProgressAbove(t *testing.T) {
	var term strings.Builder // standard output and error: one terminal
	bar := &progress{w: &term, label: "verify", on: true, start: time.Now()}
	out := bar.above(&term)
	bar.update(50, 100)
	fmt.Fprintln(out, "clean: 3 files")
	bar.update(100, 100)
	bar.done()
	lines := strings.Split(term.String(), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "\rverify [") || lines[1] != "clean: 3 files" || !strings.HasPrefix(lines[2], "\rverify [") || lines[3] != "" {
		t.Errorf("the terminal shows %q", term.String())
	}
	var plain strings.Builder
	quiet := &progress{w: &plain}
	if w := quiet.above(&plain); w != io.Writer(&plain) {
		t.Error("off a terminal the output is wrapped")
	}
}

// TestHelpTexts: kvfs help says fsck checks mounted stores too; config's
// usage has --json; mount's help has no "for kvfs mount" and no line
// over 100 columns (its -o entry was one of 900); the exit codes say
// what a foreground mount stopped by SIGINT exits with.
func TestHelpTexts(t *testing.T) {
	help := mustRun(t, "help")
	if !strings.Contains(help, "check a store, mounted or not") || !strings.Contains(help, "kvfs mount -f") {
		t.Errorf("kvfs help:\n%s", help)
	}
	if out := mustRun(t, "config", "--help"); !strings.HasPrefix(out, "Usage: kvfs config [--json] STORE") {
		t.Errorf("config --help:\n%s", out)
	}
	for _, c := range commands() {
		out := mustRun(t, c.name, "--help")
		for _, l := range strings.Split(out, "\n") {
			if len(l) > helpColumns+2 && !strings.HasPrefix(l, "Usage:") {
				t.Errorf("kvfs %s --help: a line of %d columns: %q", c.name, len(l), l)
			}
		}
	}
	mount := mustRun(t, "mount", "--help")
	if strings.Contains(mount, "for kvfs mount") || !strings.Contains(mount, "Mount options (-o") || !strings.Contains(mount, "(default: STORE/cache)") {
		t.Errorf("mount --help:\n%s", mount)
	}
}
