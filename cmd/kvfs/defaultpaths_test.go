package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDefaultPaths: the default store and mount point per platform, XDG
// and the variables scripts/run has always read.
func TestDefaultPaths(t *testing.T) {
	const home = "/home/u"
	for _, c := range []struct {
		goos       string
		env        map[string]string
		home       string
		store, mnt string
		err        bool
	}{
		{goos: "linux", home: home, store: "/home/u/.local/share/kvfs/store", mnt: "/home/u/.local/share/kvfs/mnt"},
		{goos: "darwin", home: "/Users/u", store: "/Users/u/Library/Application Support/kvfs/store", mnt: "/Users/u/Library/Application Support/kvfs/mnt"},
		{goos: "darwin", home: "/Users/u", env: map[string]string{"XDG_DATA_HOME": "/Users/u/.data"}, store: "/Users/u/.data/kvfs/store", mnt: "/Users/u/.data/kvfs/mnt"},
		{goos: "linux", home: home, env: map[string]string{"XDG_DATA_HOME": "/xdg"}, store: "/xdg/kvfs/store", mnt: "/xdg/kvfs/mnt"},
		// A relative XDG_DATA_HOME is invalid (the spec) and ignored.
		{goos: "darwin", home: "/Users/u", env: map[string]string{"XDG_DATA_HOME": "data"}, store: "/Users/u/Library/Application Support/kvfs/store", mnt: "/Users/u/Library/Application Support/kvfs/mnt"},
		{goos: "darwin", home: "/Users/u", env: map[string]string{"KVFS_STORE": "/s"}, store: "/s", mnt: "/Users/u/Library/Application Support/kvfs/mnt"},
		{goos: "linux", env: map[string]string{"KVFS_STORE": "/s", "KVFS_MOUNT": "/m"}, store: "/s", mnt: "/m"},
		{goos: "linux", env: map[string]string{"XDG_DATA_HOME": "/xdg"}, store: "/xdg/kvfs/store", mnt: "/xdg/kvfs/mnt"},
		{goos: "darwin", err: true},
		{goos: "linux", home: "relative", err: true},
	} {
		s, m, err := defaultPaths(c.goos, func(k string) string { return c.env[k] }, c.home)
		if (err != nil) != c.err || s != c.store || m != c.mnt {
			t.Errorf("%s %v home %q: %q %q %v, want %q %q (error %v)", c.goos, c.env, c.home, s, m, err, c.store, c.mnt, c.err)
		}
	}
}

// TestInitMountDefaultPaths: kvfs init and kvfs mount given no paths use
// the defaults (here from XDG_DATA_HOME); mount makes the default mount
// point, then checks the store as for given paths.
func TestInitMountDefaultPaths(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("KVFS_STORE", "")
	t.Setenv("KVFS_MOUNT", "")
	t.Setenv("XDG_DATA_HOME", xdg)
	// (On macOS the macFUSE preflight may answer first.)
	code, _, errOut := runCmd("mount")
	if code != exitFailure || runtime.GOOS == "linux" && !strings.Contains(errOut, "is not a kvfs store (create one with: kvfs init") {
		t.Fatalf("mount without a default store: exit %d: %s", code, errOut)
	}
	if fi, err := os.Stat(filepath.Join(xdg, "kvfs", "mnt")); runtime.GOOS == "linux" && (err != nil || !fi.IsDir()) {
		t.Fatalf("default mount point not made: %v", err)
	}
	out := mustRun(t, "init")
	st := filepath.Join(xdg, "kvfs", "store")
	if !strings.Contains(out, "initialised store "+st) {
		t.Fatalf("init: %s", out)
	}
	if _, err := os.Stat(filepath.Join(st, "kvfs.db")); err != nil {
		t.Fatal(err)
	}
	// The Spotlight marker is macOS's only.
	if _, err := os.Stat(filepath.Join(st, spotlightMarker)); (err == nil) != (runtime.GOOS == "darwin") {
		t.Errorf("%s: %v on %s", spotlightMarker, err, runtime.GOOS)
	}
	if code, _, errOut := runCmd("init", st, st); code != exitUsage || !strings.Contains(errOut, "want STORE") {
		t.Errorf("init with two paths: exit %d: %s", code, errOut)
	}
}
