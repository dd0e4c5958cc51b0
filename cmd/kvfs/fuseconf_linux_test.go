package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllowOtherNoStutter: a user's -o allow_other without
// user_allow_other is refused as "kvfs mount: -o allow_other ...", not
// "kvfs mount: mount: -o allow_other ...".
func TestAllowOtherNoStutter(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "fuse.conf")
	os.WriteFile(conf, []byte("# user_allow_other\nmount_max = 1000\n"), 0o644)
	err := checkAllowOtherIn(1000, conf)
	if err == nil {
		t.Fatal("allowed without user_allow_other")
	}
	if got := "kvfs mount: " + errorText("mount", err); strings.Contains(got, "mount: mount:") || !strings.HasPrefix(got, "kvfs mount: -o allow_other as a user other than root needs a line user_allow_other in "+conf) {
		t.Errorf("message: %q", got)
	}
	os.WriteFile(conf, []byte("user_allow_other\n"), 0o644)
	if err := checkAllowOtherIn(1000, conf); err != nil {
		t.Errorf("with user_allow_other: %v", err)
	}
	if got := errorText("mount", errors.New("mount: mount: x")); got != "x" {
		t.Errorf("errorText: %q", got)
	}
}
