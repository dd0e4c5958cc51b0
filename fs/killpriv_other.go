//go:build !linux

package fs

// killprivCap: macFUSE has no FUSE_HANDLE_KILLPRIV_V2 (its bit 28 means
// something else), so its kernel keeps clearing set-ID bits itself.
const killprivCap = 0
