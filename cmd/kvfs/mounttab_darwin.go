package main

import (
	"bytes"
	"fmt"

	"golang.org/x/sys/unix"
)

// mountTable reads the kernel's mount list (getfsstat(2)); macFUSE mounts
// are of type "macfuse" (older: "osxfuse") with the FUSE fsname, the
// store's directory, as their source.
func mountTable() ([]mountEntry, error) {
	n, err := unix.Getfsstat(nil, unix.MNT_NOWAIT)
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	buf := make([]unix.Statfs_t, n+8)
	n, err = unix.Getfsstat(buf, unix.MNT_NOWAIT)
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	tab := make([]mountEntry, 0, n)
	for _, st := range buf[:n] {
		tab = append(tab, mountEntry{Point: cstr(st.Mntonname[:]), FSType: cstr(st.Fstypename[:]), Source: cstr(st.Mntfromname[:])})
	}
	return tab, nil
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
