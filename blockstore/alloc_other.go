//go:build !linux

package blockstore

import (
	"errors"
	"fmt"
	"os"
)

// Allocate is not wired up off Linux (macOS has F_PREALLOCATE through
// fcntl); it fails with errors.ErrUnsupported.
func Allocate(f *os.File, off, n int64) error {
	return fmt.Errorf("allocate %s: %w", f.Name(), errors.ErrUnsupported)
}
