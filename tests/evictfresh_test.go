//go:build linux

package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() {
	// tmprename PATH SIZE: write PATH.tmp as the engine writes a snapshot
	// (create, write, fsync, close), print "closed", wait for a line on
	// stdin, then rename it onto PATH and print "renamed".
	clients["tmprename"] = func(args []string) error {
		var size int
		fmt.Sscan(args[1], &size)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		f, err := os.OpenFile(args[0]+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Println("closed")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		if err := os.Rename(args[0]+".tmp", args[0]); err != nil {
			return err
		}
		fmt.Println("renamed")
		return nil
	}
}

// TestEvictSparesFreshFiles: eviction passes over a file changed within
// --evict-min-age: a writer's temporary file, synced and closed, is idle,
// and evicting it before its rename fails the rename that saves the
// snapshot (the soak saw it under cost-size, which ranks a large new file
// low). Once older, the file goes as any other.
func TestEvictSparesFreshFiles(t *testing.T) {
	const minAge = 3 * time.Second
	m := newMount(t, "--evict-interval", "100ms", "--evict-min-age", minAge.String(), "--retention", "cost-size")
	dst := m.path("snap.mlxkv")
	cmd := client("tmprename", dst, fmt.Sprint(3<<20+123))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	if line, _ := out.ReadString('\n'); strings.TrimSpace(line) != "closed" {
		t.Fatalf("writer: %q", line)
	}
	kvfs(t, "config", m.store, "capacity=1")
	time.Sleep(minAge / 2) // many evictor passes
	fmt.Fprintln(stdin, "rename")
	line, _ := out.ReadString('\n')
	stdin.Close()
	if err := cmd.Wait(); err != nil || strings.TrimSpace(line) != "renamed" {
		t.Fatalf("the writer's rename after its fsync and close: %v, %q (evicted: %v)", err, line, evictedOrder(t, m))
	}
	// The rename is a change too: the file stays until minAge after it,
	// then goes.
	st := waitEvicted(t, m, 1)
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("%s after its eviction: %v (%+v)", filepath.Base(dst), err, st)
	}
}
