//go:build linux

package tests

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func init() {
	// fsckread PATH OFF LEN: reads LEN bytes at OFF with readahead off
	// (so that the kernel asks for exactly those bytes) and prints
	// "sha256 HEX" or "EIO".
	clients["fsckread"] = func(args []string) error {
		off, _ := strconv.ParseInt(args[1], 10, 64)
		n, _ := strconv.Atoi(args[2])
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
			return fmt.Errorf("fadvise %s: %w", args[0], err)
		}
		buf := make([]byte, n)
		k, err := f.ReadAt(buf, off)
		if errors.Is(err, syscall.EIO) {
			fmt.Println("EIO")
			return nil
		}
		if err != nil || k != n {
			return fmt.Errorf("read %s [%d,+%d): %d bytes, %v", args[0], off, n, k, err)
		}
		fmt.Printf("sha256 %x\n", sha256.Sum256(buf))
		return nil
	}
	// fsckxattr PATH: prints user.kvfs.damaged, or "ENODATA"; fails
	// unless listxattr lists it exactly when it is there.
	clients["fsckxattr"] = func(args []string) error {
		list := make([]byte, 64<<10)
		k, err := unix.Listxattr(args[0], list)
		if err != nil {
			return fmt.Errorf("listxattr %s: %w", args[0], err)
		}
		listed := slices.Contains(strings.Split(string(list[:k]), "\x00"), "user.kvfs.damaged")
		buf := make([]byte, 4096)
		n, err := unix.Getxattr(args[0], "user.kvfs.damaged", buf)
		if errors.Is(err, unix.ENODATA) {
			if listed {
				return fmt.Errorf("listxattr %s lists user.kvfs.damaged, getxattr: %w", args[0], err)
			}
			fmt.Println("ENODATA")
			return nil
		}
		if err != nil {
			return fmt.Errorf("getxattr %s: %w", args[0], err)
		}
		if !listed {
			return fmt.Errorf("listxattr %s does not list user.kvfs.damaged", args[0])
		}
		fmt.Println(string(buf[:n]))
		return nil
	}
}
