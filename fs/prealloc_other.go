//go:build !linux

package fs

import (
	"errors"
	"os"
)

// allocateAhead is not wired up off Linux: writes there land before they
// are answered.
func allocateAhead(f *os.File, off, n int64) error { return errors.ErrUnsupported }
