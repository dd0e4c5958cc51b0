package main

import (
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
