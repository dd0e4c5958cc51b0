package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// runVersion prints the module version and the VCS revision the binary
// was built from, so that a bug report names the exact code.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "", "Print kvfs's version, the revision it was built from and the Go version.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version takes no arguments")
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionLine describes the build: "kvfs v1.2.3 (rev 0123abcd…, 2026-11-30T12:00:00Z, modified) go1.26".
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "kvfs (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	line := "kvfs " + v
	if rev != "" {
		line += fmt.Sprintf(" (rev %s, %s%s)", rev, when, dirty)
	}
	return line + " " + bi.GoVersion
}
