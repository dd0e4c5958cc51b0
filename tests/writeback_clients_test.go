//go:build linux

package tests

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

func init() {
	// holdwrite FILE FLAGS: open FILE for writing (FLAGS: wronly, rdwr,
	// create, trunc, joined by commas), say "open", and run commands from stdin, one
	// per line, answering each with a line: "ok", or "SIZE SHA256" for
	// read. Commands: pwrite OFF TEXT; fill OFF N BYTE (N copies of the
	// byte); ftruncate N; fsync; read (fstat, then pread of that many
	// bytes through this descriptor: rdwr only); map (a shared mapping of
	// the whole file); mset OFF TEXT (write into the mapping); unmap;
	// close (the descriptor; a mapping stays).
	clients["holdwrite"] = func(args []string) error {
		flags := 0
		for _, f := range strings.Split(args[1], ",") {
			flags |= map[string]int{"wronly": os.O_WRONLY, "rdwr": os.O_RDWR, "create": os.O_CREATE, "trunc": os.O_TRUNC}[f]
		}
		f, err := os.OpenFile(args[0], flags, 0o644)
		if err != nil {
			return err
		}
		fmt.Println("open")
		var m []byte
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if err := holdwriteCmd(f, &m, strings.Fields(sc.Text())); err != nil {
				return fmt.Errorf("%s: %w", sc.Text(), err)
			}
		}
		return sc.Err()
	}
}

func holdwriteCmd(f *os.File, m *[]byte, c []string) error {
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(c[i], 10, 64)
		return n
	}
	var err error
	switch c[0] {
	case "pwrite":
		_, err = f.WriteAt([]byte(c[2]), num(1))
	case "fill":
		b := make([]byte, num(2))
		for i := range b {
			b[i] = c[3][0]
		}
		_, err = f.WriteAt(b, num(1))
	case "ftruncate":
		err = f.Truncate(num(1))
	case "fsync":
		err = f.Sync()
	case "read":
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		b := make([]byte, fi.Size())
		n, err := f.ReadAt(b, 0)
		if err != nil && err != io.EOF {
			return err
		}
		sum := sha256.Sum256(b[:n])
		fmt.Printf("%d %s\n", n, hex.EncodeToString(sum[:]))
		return nil
	case "map":
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if *m, err = syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err != nil {
			return err
		}
	case "mset":
		copy((*m)[num(1):], c[2])
	case "unmap":
		err = syscall.Munmap(*m)
	case "close":
		err = f.Close()
	default:
		return fmt.Errorf("unknown command")
	}
	if err != nil {
		return err
	}
	fmt.Println("ok")
	return nil
}
