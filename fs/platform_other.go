//go:build !linux

package fs

// hostPlatform: macFUSE (go-fuse builds off Linux for darwin and FreeBSD;
// kvfs's other build is macOS).
func hostPlatform() platform { return darwinPlatform() }
