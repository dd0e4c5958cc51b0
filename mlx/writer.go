package mlx

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Layout selects how a Writer stores tensors.
type Layout int

const (
	// WholeLayout writes one file: prefix, header and page-aligned tensors
	// (formats 3 and 4).
	WholeLayout Layout = iota
	// BlocksLayout writes a header-only manifest (format 5) and the tensor
	// bytes as content-addressed blocks in a "blocks" directory beside it.
	BlocksLayout
)

// DefaultBlockBytes is the engine's block size for the blocks layout.
const DefaultBlockBytes = 1 << 20

// Writer writes snapshots byte for byte as the engine's persistence worker
// does (FORMAT.md §4.3, §4.4), with the same atomic protocol: every file is
// written to NAME.tmp (mode 0600), synced, and renamed into place. Unlike
// the engine it also syncs each directory after its renames, so that a
// crash after Write returns cannot lose a name; and in the blocks layout it
// syncs the blocks directory before the manifest that lists the blocks is
// renamed into place.
type Writer struct {
	Layout Layout
	// BlockBytes is the blocks layout's block size; 0 means
	// DefaultBlockBytes. Any positive size is allowed.
	BlockBytes int64
}

// WriteStats reports what a write did, as the engine's worker metrics do.
type WriteStats struct {
	WrittenBytes int64 // bytes written to new files (blocks and manifest, or the whole file)
	ReusedBytes  int64 // block bytes already present under their name
	CopiedBytes  int64 // bytes gathered from strided memory into scratch
	ScratchPeak  int64 // largest scratch buffer used
}

// gatherBytes bounds the scratch buffer of a whole-layout write: strided
// tensors are packed and written this many bytes at a time.
const gatherBytes = 4 << 20

// Write plans h (see PlanWhole), writes tensors, given in h.Slots() order,
// to path in w's layout, and returns the header as written: with tensor
// hashes (whole layout) or block lists (blocks layout). h is not modified.
func (w *Writer) Write(path string, h *Header, tensors []Tensor) (*Header, WriteStats, error) {
	out := h.Clone()
	dataStart, _, err := PlanWhole(out)
	if err != nil {
		return nil, WriteStats{}, fmt.Errorf("write %s: %w", path, err)
	}
	slots := out.Slots()
	if len(tensors) != len(slots) {
		return nil, WriteStats{}, fmt.Errorf("write %s: %d tensors for %d slots", path, len(tensors), len(slots))
	}
	layouts := make([]*layout, len(tensors))
	for i, t := range tensors {
		if !sameShape(slots[i], t) {
			return nil, WriteStats{}, fmt.Errorf("write %s: tensor %d is %v %s, header says %v %s", path, i, t.Shape, t.DType, slots[i].Shape, slots[i].DType)
		}
		if layouts[i], err = t.prepare(); err != nil {
			return nil, WriteStats{}, fmt.Errorf("write %s: tensor %d: %w", path, i, err)
		}
	}
	var st WriteStats
	if w.Layout == BlocksLayout {
		err = w.writeBlocks(path, out, slots, layouts, &st)
	} else {
		err = writeWhole(path, out, dataStart, slots, layouts, &st)
	}
	if err != nil {
		return nil, st, fmt.Errorf("write %s: %w", path, err)
	}
	return out, st, nil
}

func writeWhole(path string, h *Header, dataStart int64, slots []*Slot, layouts []*layout, st *WriteStats) error {
	planned, err := h.MarshalJSON()
	if err != nil {
		return err
	}
	return writeAtomic(path, func(f *os.File) error {
		var scratch []byte
		hasher := NewHasher()
		for i, l := range layouts {
			hasher.Reset()
			pos := dataStart + slots[i].Off
			step := max(1, gatherBytes/l.item)
			for start := int64(0); start < l.size; start += step {
				b, copied := l.span(start, min(step, l.size-start), &scratch)
				if copied {
					st.CopiedBytes += int64(len(b))
					st.ScratchPeak = max(st.ScratchPeak, int64(cap(scratch)))
				}
				hasher.Write(b)
				if _, err := f.WriteAt(b, pos); err != nil {
					return err
				}
				pos += int64(len(b))
			}
			slots[i].Hash = HashHex(hasher.Sum64())
			st.WrittenBytes += slots[i].Bytes
		}
		js, err := h.MarshalJSON()
		if err != nil {
			return err
		}
		if len(js) != len(planned) {
			return fmt.Errorf("header byte-length drift: planned %d, final %d", len(planned), len(js))
		}
		head := make([]byte, dataStart)
		p := Prefix{HeaderLen: uint32(len(js)), DataStart: uint32(dataStart), HeaderHash: Hash(js)}
		p.AppendBinary(head[:0])
		copy(head[PrefixLen:], js)
		if _, err := f.WriteAt(head, 0); err != nil {
			return err
		}
		st.WrittenBytes += dataStart
		return nil
	})
}

func (w *Writer) writeBlocks(path string, h *Header, slots []*Slot, layouts []*layout, st *WriteStats) error {
	blockBytes := w.BlockBytes
	if blockBytes <= 0 {
		blockBytes = DefaultBlockBytes
	}
	dir := filepath.Join(filepath.Dir(path), "blocks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var scratch []byte
	wrote := false
	for i, l := range layouts {
		s := slots[i]
		s.Blocks = []BlockRef{}
		for sp := range Segments(s.Shape, l.item, blockBytes) {
			b, copied := l.span(sp.Start, sp.Count, &scratch)
			if copied {
				st.CopiedBytes += int64(len(b))
				st.ScratchPeak = max(st.ScratchPeak, int64(cap(scratch)))
			}
			sum := sha256.Sum256(b)
			name := hex.EncodeToString(sum[:])
			s.Blocks = append(s.Blocks, BlockRef{Hash: name, Bytes: int64(len(b))})
			// The engine trusts a bare existence check; so does this
			// writer, for byte-identical behaviour. Readers verify.
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				st.ReusedBytes += int64(len(b))
				continue
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := writeAtomicNoDirSync(filepath.Join(dir, name), func(f *os.File) error {
				_, err := f.Write(b)
				return err
			}); err != nil {
				return err
			}
			wrote = true
			st.WrittenBytes += int64(len(b))
		}
		s.Hash = ""
	}
	if wrote {
		if err := syncDir(dir); err != nil {
			return err
		}
	}
	h.FormatVersion = 5
	js, err := h.MarshalJSON()
	if err != nil {
		return err
	}
	p := Prefix{HeaderLen: uint32(len(js)), DataStart: uint32(PrefixLen + len(js)), HeaderHash: Hash(js)}
	buf, _ := p.AppendBinary(make([]byte, 0, PrefixLen+len(js)))
	buf = append(buf, js...)
	if err := writeAtomic(path, func(f *os.File) error {
		_, err := f.Write(buf)
		return err
	}); err != nil {
		return err
	}
	st.WrittenBytes += int64(len(buf))
	return nil
}

// writeAtomic writes path through path.tmp: fill, fsync, close, rename,
// then fsync the directory. On failure the tmp file is removed.
func writeAtomic(path string, fill func(*os.File) error) error {
	if err := writeAtomicNoDirSync(path, fill); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func writeAtomicNoDirSync(path string, fill func(*os.File) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
