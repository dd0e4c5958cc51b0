//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Spools of small files are held in memory (fs/memspool.go), up to 1 MiB a
// file; these tests write through them from several processes and read
// back from others.

func init() {
	// msp-write DIR WRITER N: write N durable files DIR/w<WRITER>-<i> as
	// the engine does (a tmp name, pwrites, fsync, close, rename), each
	// in pieces at unaligned offsets, in a shuffled order, with its
	// content from mspContent.
	clients["msp-write"] = func(args []string) error {
		w, _ := strconv.Atoi(args[1])
		n, _ := strconv.Atoi(args[2])
		for i := range n {
			want := mspContent(w, i)
			final := filepath.Join(args[0], fmt.Sprintf("w%d-%d", w, i))
			tmp := final + ".tmp"
			f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			r := rand.New(rand.NewPCG(uint64(w), uint64(i)))
			var cuts []int
			for k := 0; k < len(want); k += 1 + r.IntN(40000) {
				cuts = append(cuts, k)
			}
			cuts = append(cuts, len(want))
			order := r.Perm(len(cuts) - 1)
			for _, k := range order {
				if _, err := f.WriteAt(want[cuts[k]:cuts[k+1]], int64(cuts[k])); err != nil {
					return err
				}
			}
			if err := f.Sync(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Rename(tmp, final); err != nil {
				return err
			}
		}
		return nil
	}
	// msp-verify DIR WRITERS N: read back every file of msp-write.
	clients["msp-verify"] = func(args []string) error {
		ws, _ := strconv.Atoi(args[1])
		n, _ := strconv.Atoi(args[2])
		for w := range ws {
			for i := range n {
				p := filepath.Join(args[0], fmt.Sprintf("w%d-%d", w, i))
				got, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if want := mspContent(w, i); !bytes.Equal(got, want) {
					return fmt.Errorf("%s: read %d bytes (%s), want %d (%s)", p, len(got), sumOf(got), len(want), sumOf(want))
				}
			}
		}
		return nil
	}
}

// mspContent is file i of writer w: 1 byte to 300 KiB, every 16th file
// 0.9-1.3 MiB (some past the bound of a spool in memory), no zero bytes
// (a byte lost to a hole shows).
func mspContent(w, i int) []byte {
	r := rand.New(rand.NewPCG(uint64(w)+100, uint64(i)))
	n := 1 + r.IntN(300<<10)
	if i%16 == 15 {
		n = 900<<10 + r.IntN(400<<10)
	}
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(r.Uint32()) | 1
	}
	return b
}

// TestMemSpoolConcurrentSmallFiles: four processes each write durable
// small files (pieces at unaligned offsets, in random order, fsync,
// close, rename) at the same time; another user's process reads every
// one back, before and after a remount, and the store checks clean.
func TestMemSpoolConcurrentSmallFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{{"default", nil}, {"writeback_cache", []string{"-o", "writeback_cache"}}} {
		args := append(c.args, "-o", "allow_other")
		t.Run(c.name, func(t *testing.T) { concurrentSmallFiles(t, newMount(t, args...), args) })
	}
}

func concurrentSmallFiles(t *testing.T, m *mount, args []string) {
	{
		const writers, files = 4, 24
		m.openToOthers(t)
		dir := m.path("d")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var cmds []*exec.Cmd
		for w := range writers {
			c := client("msp-write", dir, strconv.Itoa(w), strconv.Itoa(files))
			c.Stderr = os.Stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("writer: %v", err)
			}
		}
		u := otherUser(t)
		verify := func(when string) {
			if out, err := u.client(t, "msp-verify", dir, strconv.Itoa(writers), strconv.Itoa(files)).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", when, err, out)
			}
		}
		verify("through the mount")
		sh(t, kvfsBin+" unmount "+m.mnt)
		m.check(t)
		m.start(t, args...)
		verify("after a remount")
	}
}

// TestMemSpoolSpillInterleavedReads: a file written by one process grows
// from a few unaligned writes (held in memory) past 1 MiB (its spool
// spills to a file) and on, while other processes read it between the
// writes; then a committed small file is changed in place and grown past
// the bound the same way. Every reader sees the writes, and the stored
// file is the same after a remount.
func TestMemSpoolSpillInterleavedReads(t *testing.T) {
	bothCaches(t, func(t *testing.T, m *mount) {
		p := m.path("f")
		w := startWriter(t, p, "rdwr,create,trunc", nil)
		early := startHolder(t, p)
		for _, c := range []string{"fill 3 300001 a", "pwrite 150007 middle", "ftruncate 200003",
			"fill 700001 300000 b", "pwrite 999999 edge", "fill 1000003 100003 c", "pwrite 5 early",
			"fill 2100001 7 d", "ftruncate 1048000", "fsync", "pwrite 1047999 z"} {
			w.do(t, c)
			w.check(t, c, p, early)
		}
		w.do(t, "close")
		w.check(t, "after close", p, early)
		w.checkStored(t, m, p, early)

		// A committed small file, changed in place (its spool over the
		// committed version, in memory) and grown past the bound.
		q := m.path("g")
		small := startWriter(t, q, "wronly,create,trunc", nil)
		small.do(t, "fill 0 70001 s")
		small.do(t, "close")
		small.cmd.stop(t)
		w = startWriter(t, q, "rdwr", small.model)
		early = startHolder(t, q)
		for _, c := range []string{"pwrite 65535 across", "fill 69999 10 t", "fill 1048570 20 u", "pwrite 33 after"} {
			w.do(t, c)
			w.check(t, c, q, early)
		}
		w.do(t, "close")
		w.check(t, "after close", q, early)
		w.checkStored(t, m, q, early)
	})
}
