//go:build linux

package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SmallFS mounts a filesystem of size bytes for the test (root only),
// unmounted at cleanup: a tmpfs, or an ext4 image on a loop device. They
// allocate differently: tmpfs by pages, at once; ext4 by blocks, delayed,
// with a journal and reserved clusters. The ext4 image has no blocks
// reserved for root: the store runs as root, and "full" must mean full.
func SmallFS(t testing.TB, kind string, size int64) string {
	t.Helper()
	dir := t.TempDir()
	var cmds [][]string
	switch kind {
	case "tmpfs":
		cmds = [][]string{{"mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir}}
	case "ext4":
		img := filepath.Join(t.TempDir(), "fs.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, size); err != nil {
			t.Fatal(err)
		}
		cmds = [][]string{{"mkfs.ext4", "-q", "-F", "-m", "0", img}, {"mount", "-o", "loop", img, dir}}
	default:
		t.Fatalf("unknown filesystem %q", kind)
	}
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	t.Cleanup(func() {
		// A spool's file is closed by a goroutine of its own after the
		// spool is dropped (fs/spool.go): the filesystem may be busy for
		// a moment after the test.
		var out []byte
		var err error
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil || time.Now().After(end) {
				break
			}
		}
		if err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// Fill appends to the file path until its filesystem has no byte left, as
// another program on the same disk would, and checks that nothing is.
func Fill(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{1 << 16, 4096, 512, 1} {
		b := bytes.Repeat([]byte{0x5a}, n)
		for {
			if _, err := f.Write(b); errors.Is(err, syscall.ENOSPC) {
				break
			} else if err != nil {
				t.Fatalf("fill %s: %v", path, err)
			}
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil || st.Bavail != 0 {
		t.Fatalf("disk not full after filling %s: %d blocks free (%v)", path, st.Bavail, err)
	}
}

// SparsifyIndex punches out the pages of a closed bbolt index that hold
// nothing (its free pages, and its tail past the last page in use): an
// index that bbolt grew (with truncate, which allocates nothing) is in that
// state on a disk that filled up before kvfs allocated the index's space.
// Every page a transaction writes then needs new space.
func SparsifyIndex(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ps := int64(db.Info().PageSize)
	var holes [][2]int64
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; int64(id)*ps < tx.Size(); id++ {
			if p, err := tx.Page(id); err != nil {
				return err
			} else if p != nil && p.Type == "free" {
				holes = append(holes, [2]int64{int64(id) * ps, ps})
			}
		}
		holes = append(holes, [2]int64{tx.Size(), 1 << 40})
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, h := range holes {
		if err := syscall.Fallocate(int(f.Fd()), 0x01|0x02, h[0], h[1]); err != nil { // KEEP_SIZE|PUNCH_HOLE
			t.Fatalf("punch %s [%d,+%d): %v", path, h[0], h[1], err)
		}
	}
	t.Logf("index %s: %d free pages and the tail punched out", path, len(holes)-1)
}
