package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/store"
)

// TestInUseNamesPID: a store whose lock another process holds (here this
// one, through a second descriptor) is refused naming the holder's PID
// and command, from /proc/locks; it said only "store is in use by
// another process".
func TestInUseNamesPID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/locks is Linux's")
	}
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", st)
	s, err := store.Open(st, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := fmt.Sprintf("its lock is held by PID %d (%s", os.Getpid(), os.Args[0])
	for _, args := range [][]string{{"ls", st}, {"gc", st}, {"fsck", st}} {
		code, _, errOut := runCmd(args...)
		if code == exitOK || !strings.Contains(errOut, "in use") || !strings.Contains(errOut, want) {
			t.Errorf("kvfs %v of a store in use: exit %d: %s", args, code, errOut)
		}
	}
}
