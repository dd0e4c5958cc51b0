//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// Clients run in their own process (see client): they touch the mount the
// way an engine or a user program does. Each returns an exit code and
// reports on stdout/stderr.
var clients = map[string]func(args []string) error{
	// fsyncwrite FILE: write, fsync (the spool becomes a pack), write
	// again over part of it and past its end, close, and check the result
	// by reading FILE back.
	"fsyncwrite": func(args []string) error {
		a := bytes.Repeat([]byte("A"), 3<<20)
		b := bytes.Repeat([]byte("B"), 2<<20)
		f, err := os.OpenFile(args[0], os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Write(a); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if _, err := f.WriteAt(b, 2<<20); err != nil {
			return err
		}
		mid := make([]byte, 10)
		if _, err := f.ReadAt(mid, (2<<20)-5); err != nil || string(mid) != "AAAAABBBBB" {
			return fmt.Errorf("read through the write handle: %q %v", mid, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
		got, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		want := append(a[:2<<20], b...)
		if !bytes.Equal(got, want) {
			return fmt.Errorf("after write, fsync, write: %d bytes, not the expected %d", len(got), len(want))
		}
		return nil
	},
	// readseq FILE: read FILE sequentially in 1 MiB reads; print seconds.
	"readseq": func(args []string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		t := time.Now()
		for {
			_, err := f.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		fmt.Println(time.Since(t).Seconds())
		return nil
	},
	// whoami: print the user name of the process's uid (tests of other
	// users check that a client runs as the user it should).
	"whoami": func(args []string) error {
		u, err := user.LookupId(strconv.Itoa(os.Getuid()))
		if err != nil {
			return err
		}
		fmt.Println(u.Username)
		return nil
	},
	// mmaptouch FILE: map FILE and read one byte of every page; print
	// seconds.
	"mmaptouch": func(args []string) error {
		t := time.Now()
		b, err := mapFile(args[0])
		if err != nil {
			return err
		}
		var sum byte
		for i := 0; i < len(b); i += 4096 {
			sum += b[i]
		}
		fmt.Println(time.Since(t).Seconds(), sum)
		return nil
	},
	// memfs FILE MNT: serve FILE's bytes from memory at MNT/file with
	// go-fuse and kvfs's mount options, the FUSE ceiling of the machine;
	// print "ready", unmount on SIGTERM.
	"memfs": serveMemFS,
	// loopbackfs DIR MNT: go-fuse's loopback file system of DIR at MNT,
	// with kvfs's mount options; print "ready", unmount on SIGTERM.
	"loopbackfs": serveLoopbackFS,
	// mmapcmp MOUNTED LOCAL: map both files and compare every byte.
	"mmapcmp": func(args []string) error {
		a, err := mapFile(args[0])
		if err != nil {
			return err
		}
		b, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%s differs from %s through mmap", args[0], args[1])
		}
		return nil
	},
	// holdread FILE WANT: open FILE, print "open", wait for a line on
	// stdin, then read FILE through the open descriptor and compare with
	// the local file WANT.
	"holdread": func(args []string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Println("open")
		bufio.NewReader(os.Stdin).ReadString('\n')
		want, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		got := make([]byte, len(want)+1)
		n, _ := f.ReadAt(got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			return fmt.Errorf("open descriptor read %d bytes, not the original %d", n, len(want))
		}
		return nil
	},
	// engine DIR LAYOUT TOKENS: write a snapshot into DIR as the engine
	// does (tmp, fsync, rename) with mlx.Writer, in layout whole or blocks.
	"engine": func(args []string) error {
		var n int
		fmt.Sscan(args[2], &n)
		h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(n, 1))
		w := &mlx.Writer{}
		if args[1] == "blocks" {
			w = &mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 16384}
		}
		_, _, err := w.Write(filepath.Join(args[0], fmt.Sprintf("snap-%d.mlxkv", n)), h, tensors)
		return err
	},
}

func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil, err
	}
	return syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
}

func runClient(name string, args []string) int {
	fn, ok := clients[name]
	if !ok {
		fn, ok = integrityClients[name]
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown client", name)
		return 2
	}
	if err := fn(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
