//go:build !linux

package main

// detachFlag is MNT_FORCE on the BSDs and macOS, which have no lazy unmount.
const detachFlag = 0x80000
