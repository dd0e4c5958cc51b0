package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMatchMountNotKvfs: kvfs match --mount of a directory that is not
// a kvfs mount is refused, not answered with a plain miss; inside a
// store's mount or a pool's, the lookup goes through its mount point.
func TestMatchMountNotKvfs(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "t.json")
	os.WriteFile(tokens, []byte("[1,2,3]"), 0o600)
	code, out, errOut := runCmd("match", "--model", "m", "--fingerprint", "f", "--tokens", tokens, "--mount", dir)
	if code != exitUsage || !strings.Contains(errOut, "not in a kvfs mount") || out != "" {
		t.Errorf("match --mount of a plain directory: exit %d: %s%s", code, out, errOut)
	}
	pool := mountEntry{Point: "/mnt/pool", FSType: "fuse.kvfs", Source: poolFsName}
	if root, err := matchMountEntry("/mnt/pool/models", pool, true); err != nil || root != "/mnt/pool" {
		t.Errorf("inside a pool mount: %q, %v", root, err)
	}
	st := mountEntry{Point: "/mnt/kv", FSType: "fuse.kvfs", Source: "/srv/store"}
	if root, err := matchMountEntry("/mnt/kv/sub", st, true); err != nil || root != "/mnt/kv" {
		t.Errorf("inside a store's mount: %q, %v", root, err)
	}
}
