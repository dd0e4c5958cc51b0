//go:build !linux

package fs

// directMountFlags: mounts go through macFUSE's mount helper, which reads
// ro from the options.
func directMountFlags([]string) uintptr { return 0 }
