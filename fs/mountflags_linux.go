package fs

import (
	"slices"
	"syscall"
)

// directMountFlags are the mount(2) flags of a direct mount (as root)
// given the kernel options: go-fuse's default, nosuid and nodev, and
// MS_RDONLY for ro, which in the options string alone makes only the
// superblock read-only while the mount itself shows rw.
func directMountFlags(kernelOpts []string) uintptr {
	if !slices.Contains(kernelOpts, "ro") {
		return 0 // go-fuse's default
	}
	return syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY
}
