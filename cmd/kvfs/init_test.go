package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitRefuses: kvfs init refuses up front a directory of user files
// and a default store at the default mount point (both succeeded, the
// second to fail at the mount with a raw "bind: operation not
// permitted"), and makes nothing there; an empty directory, or one
// holding only a filesystem's lost+found, is fine.
func TestInitRefuses(t *testing.T) {
	dir := t.TempDir()
	user := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(user, "docs"), 0o700)
	os.WriteFile(filepath.Join(user, "notes.txt"), []byte("mine"), 0o600)
	code, _, errOut := runCmd("init", user)
	if code != exitFailure || !strings.Contains(errOut, "not empty (it holds docs, notes.txt)") {
		t.Errorf("init of a directory of user files: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(user, "kvfs.db")); err == nil {
		t.Error("init made a store among the user's files")
	}

	same := filepath.Join(dir, "same")
	t.Setenv("KVFS_STORE", same)
	t.Setenv("KVFS_MOUNT", same)
	code, _, errOut = runCmd("init")
	if code != exitFailure || !strings.Contains(errOut, "at or inside the default mount point "+same) {
		t.Errorf("init with KVFS_STORE = KVFS_MOUNT: exit %d: %s", code, errOut)
	}
	t.Setenv("KVFS_STORE", filepath.Join(same, "store"))
	if code, _, errOut = runCmd("init"); code != exitFailure || !strings.Contains(errOut, "default mount point") {
		t.Errorf("init with KVFS_STORE inside KVFS_MOUNT: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(same); err == nil {
		t.Error("a refused init made the directory")
	}

	fresh := filepath.Join(dir, "fs")
	os.MkdirAll(filepath.Join(fresh, "lost+found"), 0o700)
	mustRun(t, "init", fresh)
	mustRun(t, "init", filepath.Join(dir, "new"))
}

// TestEmptyStoreFootprint: kvfs init and kvfs stats say what an empty
// store takes on disk (its reserve and journal: 256 MiB on a large
// filesystem), which stored bytes of 0 hid.
func TestEmptyStoreFootprint(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	out := mustRun(t, "init", st)
	if !strings.Contains(out, "on disk: ") || !strings.Contains(out, "a reserve of ") || !strings.Contains(out, "a journal of ") {
		t.Errorf("init does not say what the store takes on disk:\n%s", out)
	}
	out = mustRun(t, "stats", st)
	if !strings.Contains(out, "on disk:       ") || !strings.Contains(out, "(preallocated), reserve ") {
		t.Errorf("stats does not say what the store takes on disk:\n%s", out)
	}
	var js struct {
		Files int64
		Disk  footprint
	}
	if err := json.Unmarshal([]byte(mustRun(t, "stats", "--json", st)), &js); err != nil {
		t.Fatal(err)
	}
	reserve, err := os.Stat(filepath.Join(st, "reserve"))
	if err != nil || js.Disk.Reserve < reserve.Size() || js.Disk.Journal == 0 || js.Disk.Total < js.Disk.Reserve+js.Disk.Journal {
		t.Errorf("stats --json: disk %+v, reserve %v", js.Disk, err)
	}
}
