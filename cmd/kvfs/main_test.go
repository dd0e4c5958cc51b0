package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const fixtures = "../../mlx/testdata/mlxbun"

var (
	whole300  = filepath.Join(fixtures, "whole/fixture-fingerprint/base/00000000-0000-4000-8000-000000000300.mlxkv")
	blocks400 = filepath.Join(fixtures, "blocks/fixture-fingerprint/base/00000000-0000-4000-8000-000000000400.mlxkv")
)

func runCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestInspectText(t *testing.T) {
	code, out, errOut := runCmd("inspect", "--verify", whole300, blocks400)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"format:       3, whole layout", "format:       5, blocks layout (128 block references)",
		"model:        fixture/tiny-kv", `namespace:    "" (base model)`, "tokens:       300", "tokens:       400",
		"header:       2331 bytes, hash ec6f5a822a956720, data at 16384", "[1 8 300 64]", "bfloat16",
		"tensor bytes: 1228800 (1.2 MiB)", "verify:       ok", "created:      2026-01-01T00:00:00Z",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "verify:       ok") != 2 {
		t.Errorf("want two verified files:\n%s", out)
	}
}

func TestInspectJSON(t *testing.T) {
	code, out, errOut := runCmd("inspect", "--json", blocks400)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.FormatVersion != 5 || r.Layout != "blocks" || r.Tokens != 400 || r.Blocks != 128 || r.TensorBytes != 1638400 ||
		len(r.Caches) != 2 || r.Caches[1].Tensors[0].DType != "bfloat16" || r.Verified != nil || !r.Trimmable {
		t.Fatalf("report %+v", r)
	}
}

func TestInspectFailures(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.mlxkv")
	b, err := os.ReadFile(whole300)
	if err != nil {
		t.Fatal(err)
	}
	b[16384+100] ^= 1
	if err := os.WriteFile(corrupt, b, 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.mlxkv")
	os.WriteFile(garbage, []byte("hello, not a snapshot"), 0o600)

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "--verify", corrupt}, exitCorrupt, "checksum mismatch"},
		{[]string{"inspect", "--json", "--verify", corrupt}, exitCorrupt, "slot 0"},
		{[]string{"inspect", corrupt}, exitOK, ""},
		{[]string{"inspect", garbage}, exitFailure, "not an mlx-bun KV snapshot (formats 2-5"},
		{[]string{"inspect", filepath.Join(dir, "missing")}, exitFailure, "no such file"},
		{[]string{"inspect", dir}, exitFailure, "is a directory"},
		{[]string{"inspect", "--verify", whole300, corrupt, garbage}, exitCorrupt, "1 of 3 files"},
		{[]string{"inspect", whole300, garbage}, exitFailure, "1 of 2 files could not be inspected"},
		{[]string{"inspect"}, exitUsage, "no file given"},
		{[]string{"inspect", "--nope", whole300}, exitUsage, "unknown flag"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
		{[]string{}, exitUsage, ""},
		{[]string{"help"}, exitOK, ""},
		{[]string{"inspect", "--help"}, exitOK, "--verify"},
		{[]string{"help", "inspect"}, exitOK, "--json"},
	} {
		code, out, errOut := runCmd(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("kvfs %v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", c.args, code, c.code, c.want, out, errOut)
		}
	}
}

// TestHelpOnStdout: help is output, not an error: "kvfs CMD --help" and
// "kvfs help CMD" print every command's usage to standard output and
// nothing to standard error; a bad flag prints one line and a hint to
// standard error, not the whole usage; a command without flags shows no
// empty "Flags:" section.
func TestHelpOnStdout(t *testing.T) {
	for _, c := range commands() {
		for _, args := range [][]string{{c.name, "--help"}, {"help", c.name}} {
			code, out, errOut := runCmd(args...)
			if code != exitOK || !strings.HasPrefix(out, "Usage: kvfs "+c.name) || errOut != "" {
				t.Errorf("kvfs %v: exit %d\nstdout: %q\nstderr: %q", args, code, out, errOut)
			}
			if strings.HasSuffix(strings.TrimSpace(out), "Flags:") {
				t.Errorf("kvfs %v: an empty Flags: section\n%s", args, out)
			}
		}
		code, out, errOut := runCmd(c.name, "--no-such-flag")
		if code != exitUsage || out != "" || strings.Contains(errOut, "Usage:") || !strings.Contains(errOut, "--no-such-flag") {
			t.Errorf("kvfs %s --no-such-flag: exit %d\nstdout: %q\nstderr: %q", c.name, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCmd(args...)
		if code != exitOK || !strings.HasPrefix(out, "kvfs ") || !strings.Contains(out, " go1.") || errOut != "" {
			t.Errorf("kvfs %v: exit %d\nstdout: %q\nstderr: %q", args, code, out, errOut)
		}
	}
}

// TestHelpOfHelp: asking help for help is kvfs's own help, not a
// recursion (it once ran until the stack overflowed).
func TestHelpOfHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"help", "-h"}, {"help", "--help"}, {"-h", "help"}, {"--help", "--help"}} {
		code, out, errOut := runCmd(args...)
		if code != exitOK || !strings.Contains(out, "Commands:") || errOut != "" {
			t.Errorf("kvfs %v: exit %d\nstdout: %q\nstderr: %q", args, code, out, errOut)
		}
	}
}

// TestBinary runs the built command as a separate process, as users do, to
// check that main turns errors into exit codes.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kvfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "inspect", "--verify", blocks400).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verify:       ok") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	err = exec.Command(bin, "inspect", "/nonexistent").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
		t.Fatalf("missing file: %v", err)
	}
}
