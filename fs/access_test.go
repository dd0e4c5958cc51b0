package fs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestProcGroups(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(p, []byte("Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1000 \nNgid:\t0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gs, err := procGroups(p)
	if err != nil || !slices.Equal(gs, []uint32{4, 24, 1000}) {
		t.Fatalf("groups %v, %v", gs, err)
	}
	if err := os.WriteFile(p, []byte("Name:\tx\nGroups:\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if gs, err := procGroups(p); err != nil || len(gs) != 0 {
		t.Fatalf("no groups: %v, %v", gs, err)
	}
	if _, err := procGroups(filepath.Join(t.TempDir(), "gone")); err == nil {
		t.Fatal("a missing status file gave no error")
	}
}
