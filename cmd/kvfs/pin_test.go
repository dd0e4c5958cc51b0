package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/store"
)

// TestPinOutsideMount: kvfs pin and unpin of a file outside any kvfs
// mount are refused, and the file gets no attribute (pin set
// user.kvfs.pin on it, where it means nothing, and said nothing).
func TestPinOutsideMount(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"pin", "unpin"} {
		code, _, errOut := runCmd(cmd, f)
		if code != exitFailure || !strings.Contains(errOut, "not inside a kvfs mount") || !strings.Contains(errOut, "--store") {
			t.Errorf("kvfs %s of a file outside a mount: exit %d: %s", cmd, code, errOut)
		}
		if _, err := unix.Getxattr(f, store.PinXattr, make([]byte, 16)); !errors.Is(err, errNoAttr) {
			t.Errorf("after kvfs %s, %s: %v, want no attribute", cmd, store.PinXattr, err)
		}
	}
}
