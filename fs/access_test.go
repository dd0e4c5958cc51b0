package fs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestProcGroups(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t4 24 1000 \nNgid:\t0\n")
	if gs, err := procGroups(p, 1000, 100); err != nil || !slices.Equal(gs, []uint32{4, 24, 1000}) {
		t.Fatalf("groups %v, %v", gs, err)
	}
	// Another process under that pid (or another namespace's): none.
	if gs, err := procGroups(p, 1001, 100); err != nil || gs != nil {
		t.Fatalf("groups of another uid: %v, %v", gs, err)
	}
	if gs, err := procGroups(p, 1000, 101); err != nil || gs != nil {
		t.Fatalf("groups of another gid: %v, %v", gs, err)
	}
	write("Name:\tx\nUid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\nGroups:\t\n")
	if gs, err := procGroups(p, 5, 6); err != nil || len(gs) != 0 {
		t.Fatalf("no groups: %v, %v", gs, err)
	}
	if _, err := procGroups(filepath.Join(t.TempDir(), "gone"), 5, 6); err == nil {
		t.Fatal("a missing status file gave no error")
	}
	// The real thing: this process's own groups.
	gs, err := procGroups("/proc/self/status", uint32(os.Getuid()), uint32(os.Getgid()))
	want, _ := os.Getgroups()
	if err != nil || len(gs) != len(want) {
		t.Fatalf("own groups %v, want %v (%v)", gs, want, err)
	}
}
