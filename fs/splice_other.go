//go:build !linux

package fs

// spliceReads is off where FUSE has no splice (macFUSE): reads copy.
const spliceReads = false
