package fs

// hostPlatform: Linux's FUSE.
func hostPlatform() platform { return linuxPlatform() }
