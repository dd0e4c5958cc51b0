package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMatchMountNotKvfs: kvfs match --mount of a directory that is not
// a kvfs mount is refused, not answered with a plain miss; so is a pool
// mount, pointing to --pool; inside a store's mount, the lookup goes
// through its mount point.
func TestMatchMountNotKvfs(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "t.json")
	os.WriteFile(tokens, []byte("[1,2,3]"), 0o600)
	code, out, errOut := runCmd("match", "--model", "m", "--fingerprint", "f", "--tokens", tokens, "--mount", dir)
	if code != exitUsage || !strings.Contains(errOut, "not in a kvfs mount") || out != "" {
		t.Errorf("match --mount of a plain directory: exit %d: %s%s", code, out, errOut)
	}
	pool := mountEntry{Point: "/mnt/pool", FSType: "fuse.kvfs", Source: poolFsName}
	if _, err := matchMountEntry("/mnt/pool", pool, true); err == nil || !strings.Contains(err.Error(), "pool mount") || !strings.Contains(err.Error(), "--pool POOL") {
		t.Errorf("a pool mount: %v", err)
	}
	st := mountEntry{Point: "/mnt/kv", FSType: "fuse.kvfs", Source: "/srv/store"}
	if root, err := matchMountEntry("/mnt/kv/sub", st, true); err != nil || root != "/mnt/kv" {
		t.Errorf("inside a store's mount: %q, %v", root, err)
	}
}
