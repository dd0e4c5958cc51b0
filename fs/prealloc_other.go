//go:build !linux

package fs

import (
	"errors"
	"math"
	"os"
)

// allocateAhead is not wired up off Linux: writes there land before they
// are answered.
func allocateAhead(f *os.File, off, n int64) error { return errors.ErrUnsupported }

// fileSizeLimit: no early answers off Linux, so no limit to check.
func fileSizeLimit() int64 { return math.MaxInt64 }
