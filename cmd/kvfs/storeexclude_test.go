package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestExcludeStore: on macOS a new store gets the Spotlight marker and a
// Time Machine exclusion, each best effort (a failure is a warning with
// the cause); on Linux nothing is done.
func TestExcludeStore(t *testing.T) {
	const dir = "/Users/u/Library/Application Support/kvfs/store"
	for _, c := range []struct {
		name      string
		goos      string
		createErr error
		tmutilOut string
		tmutilErr bool
		calls     []string
		done      int
		warnings  []string
	}{
		{name: "linux", goos: "linux"},
		{name: "mac", goos: "darwin", calls: []string{"create " + dir + "/.metadata_never_index", tmutil + " addexclusion " + dir}, done: 2},
		{name: "mac, no tmutil", goos: "darwin", tmutilErr: true, done: 1,
			calls:    []string{"create " + dir + "/.metadata_never_index", tmutil + " addexclusion " + dir},
			warnings: []string{"Time Machine: tmutil addexclusion " + dir + ": exit status 1"}},
		{name: "mac, tmutil refuses", goos: "darwin", tmutilErr: true, tmutilOut: "tmutil: addexclusion requires Full Disk Access privileges.\n", done: 1,
			calls:    []string{"create " + dir + "/.metadata_never_index", tmutil + " addexclusion " + dir},
			warnings: []string{"requires Full Disk Access privileges."}},
		{name: "mac, marker fails", goos: "darwin", createErr: errors.New("permission denied"), done: 1,
			calls:    []string{"create " + dir + "/.metadata_never_index", tmutil + " addexclusion " + dir},
			warnings: []string{"Spotlight: create " + dir + "/.metadata_never_index: permission denied"}},
	} {
		var calls []string
		sys := excludeSys{
			create: func(p string) error { calls = append(calls, "create "+p); return c.createErr },
			run: func(name string, args ...string) ([]byte, error) {
				calls = append(calls, name+" "+strings.Join(args, " "))
				if c.tmutilErr {
					return []byte(c.tmutilOut), errors.New("exit status 1")
				}
				return nil, nil
			},
		}
		done, warnings := excludeStore(c.goos, dir, sys)
		if !slices.Equal(calls, c.calls) || len(done) != c.done || len(warnings) != len(c.warnings) {
			t.Errorf("%s: calls %q done %q warnings %q", c.name, calls, done, warnings)
			continue
		}
		for i, w := range c.warnings {
			if !strings.Contains(warnings[i], w) {
				t.Errorf("%s: warning %q lacks %q", c.name, warnings[i], w)
			}
		}
	}
}
