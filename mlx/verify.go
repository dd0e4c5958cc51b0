package mlx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// BlockSource opens the blocks of a format-5 snapshot by their sha256 name.
type BlockSource interface {
	// OpenBlock opens the block named hash (64 lowercase hex digits) for
	// reading from its start. The caller closes it. A missing block is an
	// error satisfying errors.Is(err, fs.ErrNotExist).
	OpenBlock(hash string) (io.ReadCloser, error)
}

// BlockDir is the BlockSource of the engine's on-disk layout: the blocks of
// a manifest in directory D are D/blocks/<hash>.
type BlockDir string

// OpenBlock opens D/blocks/hash.
func (d BlockDir) OpenBlock(hash string) (io.ReadCloser, error) {
	return os.Open(filepath.Join(string(d), "blocks", hash))
}

// SlotReader returns the logical bytes of slot i (in Header.Slots order):
// read from r, the snapshot file, in the whole layout; from blocks in the
// blocks layout. A block shorter or longer than its listed size is an error.
// The reader does not verify hashes; Verify does.
func (s *Snapshot) SlotReader(i int, r io.ReaderAt, blocks BlockSource) io.Reader {
	slot := s.Header.Slots()[i]
	if !s.Blocks() {
		return io.NewSectionReader(r, s.DataStart()+slot.Off, slot.Bytes)
	}
	return &blockReader{s: s, slot: i, refs: slot.Blocks, src: blocks}
}

// blockReader concatenates the blocks of one tensor.
type blockReader struct {
	s    *Snapshot
	slot int
	refs []BlockRef
	src  BlockSource
	cur  io.ReadCloser
	left int64 // bytes left in cur
	err  error
}

func (b *blockReader) Read(p []byte) (int, error) {
	for b.err == nil {
		if b.cur == nil {
			if len(b.refs) == 0 {
				return 0, io.EOF
			}
			if b.src == nil {
				b.err = &FormatError{File: b.s.Name, Check: fmt.Sprintf("slot %d", b.slot), Err: errors.New("blocks layout needs a block source")}
				break
			}
			rc, err := b.src.OpenBlock(b.refs[0].Hash)
			if err != nil {
				b.err = &FormatError{File: b.s.Name, Check: fmt.Sprintf("slot %d block %s", b.slot, b.refs[0].Hash), Err: err}
				break
			}
			b.cur, b.left = rc, b.refs[0].Bytes
		}
		if b.left == 0 {
			// The listed size is consumed; the block must end here.
			var one [1]byte
			n, err := io.ReadFull(b.cur, one[:])
			b.cur.Close()
			b.cur = nil
			if n != 0 {
				b.err = b.blockErr("block is longer than the %d bytes listed", b.refs[0].Bytes)
				break
			}
			if err != io.EOF {
				b.err = b.blockErr("%v", err)
				break
			}
			b.refs = b.refs[1:]
			continue
		}
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err := b.cur.Read(p)
		b.left -= int64(n)
		if err == io.EOF && b.left > 0 {
			b.err = b.blockErr("block is shorter than the %d bytes listed", b.refs[0].Bytes)
			return n, b.err
		}
		if err != nil && err != io.EOF {
			b.err = b.blockErr("%v", err)
			return n, b.err
		}
		if n > 0 {
			return n, nil
		}
	}
	if b.cur != nil {
		b.cur.Close()
		b.cur = nil
	}
	return 0, b.err
}

func (b *blockReader) blockErr(format string, args ...any) error {
	return &FormatError{File: b.s.Name, Check: fmt.Sprintf("slot %d block %s", b.slot, b.refs[0].Hash),
		Err: ErrMalformed, Detail: fmt.Sprintf(format, args...)}
}

// verifyBufBytes is the read size of Verify.
const verifyBufBytes = 1 << 20

// Verify checks every tensor against its recorded hash: Bun.hash of the
// whole tensor (whole layout, from r) or the sha256 of each block (blocks
// layout, from blocks; r is unused). It streams with a fixed buffer, so it
// never holds a tensor in memory. The first mismatch is a *FormatError
// wrapping ErrChecksum that names the tensor or block.
func (s *Snapshot) Verify(ctx context.Context, r io.ReaderAt, blocks BlockSource) error {
	buf := make([]byte, verifyBufBytes)
	for i, slot := range s.Header.Slots() {
		if err := ctx.Err(); err != nil {
			return err
		}
		check := fmt.Sprintf("slot %d", i)
		if !s.Blocks() {
			want, err := strconv.ParseUint(slot.Hash, 16, 64)
			if err != nil {
				return &FormatError{File: s.Name, Check: check + " hash", Err: ErrMalformed, Detail: err.Error()}
			}
			h := NewHasher()
			if _, err := io.CopyBuffer(h, io.NewSectionReader(r, s.DataStart()+slot.Off, slot.Bytes), buf); err != nil {
				return &FormatError{File: s.Name, Check: check, Err: err}
			}
			if got := h.Sum64(); got != want {
				return &FormatError{File: s.Name, Check: check, Err: ErrChecksum,
					Detail: fmt.Sprintf("tensor at offset %d hashes to %s, header says %s", s.DataStart()+slot.Off, HashHex(got), slot.Hash)}
			}
			continue
		}
		for j, ref := range slot.Blocks {
			br := &blockReader{s: s, slot: i, refs: []BlockRef{ref}, src: blocks}
			sum := sha256.New()
			if _, err := io.CopyBuffer(sum, br, buf); err != nil {
				return err
			}
			if got := hex.EncodeToString(sum.Sum(nil)); got != ref.Hash {
				return &FormatError{File: s.Name, Check: fmt.Sprintf("%s block %d", check, j), Err: ErrChecksum,
					Detail: fmt.Sprintf("block %s hashes to %s", ref.Hash, got)}
			}
		}
	}
	return nil
}
