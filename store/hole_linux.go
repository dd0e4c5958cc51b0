package store

import (
	"errors"
	"io"
	"os"
)

// nextHole returns the offset of the first hole at or after off (the file
// size if there is none).
func nextHole(f *os.File, off int64) (int64, error) {
	const seekHole = 4 // SEEK_HOLE
	pos, err := f.Seek(off, seekHole)
	if errors.Is(err, io.EOF) {
		return off, nil
	}
	return pos, err
}
