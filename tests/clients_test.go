package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// Clients run in their own process (see client): they touch the mount the
// way an engine or a user program does. Each returns an exit code and
// reports on stdout/stderr.
var clients = map[string]func(args []string) error{
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
		fmt.Fprintln(os.Stderr, "unknown client", name)
		return 2
	}
	if err := fn(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
