package llamastate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A trimmed view of a state file is the file llama.cpp would have saved
// for the conversation's first n tokens: the same magic and version, the
// first n tokens, the first n cells' metadata, and of every layer the
// first n rows of K and V (of a transposed V, the first n elements of
// each channel's run). Every byte but the few that hold counts comes from
// the original, so a view is a map of the original, not a copy (as the
// store's views of snapshots are: mlx.PrefixView).

// ErrNotTrimmable: a file cannot be cut to n tokens (more than it holds,
// cells that are not the tokens 0…n-1 in order, more than one cache or
// stream).
var ErrNotTrimmable = errors.New("not trimmable")

// Run is Len bytes of a view at Off, read at SrcOff of the original.
type Run struct {
	Off, Len, SrcOff int64
}

// View is a state file cut to its first tokens: Prefix holds its first
// bytes (up to the cell count), Runs the rest, in order and contiguous.
type View struct {
	Prefix []byte
	Runs   []Run
	Size   int64
}

// Trim maps f, read from src, cut to its first n tokens (1 ≤ n ≤ its
// tokens). The cells must be the tokens in order (cell i at position i,
// one cell per token), in one cache of one stream: what a sequence's save
// holds; anything else fails with ErrNotTrimmable.
func Trim(f *File, src io.ReaderAt, n int64) (*View, error) {
	if n < 1 || n > int64(len(f.Tokens)) {
		return nil, fmt.Errorf("%w: %d of %d tokens", ErrNotTrimmable, n, len(f.Tokens))
	}
	if len(f.Caches) != 1 || len(f.Caches[0].Streams) != 1 {
		return nil, fmt.Errorf("%w: %d caches (a sliding-window model's, or several streams)", ErrNotTrimmable, len(f.Caches))
	}
	st := f.Caches[0].Streams[0]
	if int64(st.Cells) != int64(len(f.Tokens)) || len(st.K) == 0 {
		return nil, fmt.Errorf("%w: %d cells for %d tokens", ErrNotTrimmable, st.Cells, len(f.Tokens))
	}
	// The cells' metadata: positions 0…n-1, and where cell n starts.
	r := &reader{src: src, off: st.Meta, size: f.Size}
	var ext [cellExtLen]byte
	for i := int64(0); i < n && r.err == nil; i++ {
		pos := r.u32()
		nSeq := r.u32()
		if st.Ext {
			r.bytes(ext[:])
		}
		r.skip(int64(nSeq) * 4)
		if r.err == nil && int64(pos) != i {
			return nil, fmt.Errorf("%w: cell %d holds position %d", ErrNotTrimmable, i, pos)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	metaEnd := r.off
	// The count fields before the cells: n_stream and cell_count, just
	// before the metadata.
	v := &View{}
	le := binary.LittleEndian
	v.Prefix = le.AppendUint32(v.Prefix, f.Magic)
	v.Prefix = le.AppendUint32(v.Prefix, f.Version)
	v.Prefix = le.AppendUint32(v.Prefix, uint32(n))
	for _, t := range f.Tokens[:n] {
		v.Prefix = le.AppendUint32(v.Prefix, t)
	}
	if f.Magic == MagicSession {
		v.Prefix = le.AppendUint32(v.Prefix, uint32(len(f.Arch)))
		v.Prefix = append(v.Prefix, f.Arch...)
	}
	v.Prefix = le.AppendUint32(v.Prefix, 1) // n_stream
	v.Prefix = le.AppendUint32(v.Prefix, uint32(n))
	pos := int64(len(v.Prefix))
	add := func(src, n int64) {
		if n <= 0 {
			return
		}
		if k := len(v.Runs); k > 0 && v.Runs[k-1].SrcOff+v.Runs[k-1].Len == src {
			v.Runs[k-1].Len += n // contiguous in the original too
		} else {
			v.Runs = append(v.Runs, Run{Off: pos, Len: n, SrcOff: src})
		}
		pos += n
	}
	add(st.Meta, metaEnd-st.Meta)
	// v_trans and n_layer lie just before the first K block's header.
	const rowHeader = 4 + 8   // type, row size
	const transHeader = 4 * 3 // type, element size, channels
	add(st.K[0].Off-rowHeader-8, 8)
	for _, b := range st.K {
		add(b.Off-rowHeader, rowHeader)
		add(b.Off, n*int64(b.Width))
	}
	for _, b := range st.V {
		if !st.VTrans {
			add(b.Off-rowHeader, rowHeader)
			add(b.Off, n*int64(b.Width))
			continue
		}
		add(b.Off-transHeader, transHeader)
		for j := int64(0); j < b.Rows; j++ {
			add(b.Off+j*b.RowBytes, n*int64(b.Width))
		}
	}
	v.Size = pos
	return v, nil
}

// ReadAt reads the view's bytes at off from the original, src.
func (v *View) ReadAt(src io.ReaderAt, p []byte, off int64) (int, error) {
	var done int
	for done < len(p) && off < v.Size {
		if off < int64(len(v.Prefix)) {
			k := copy(p[done:], v.Prefix[off:])
			done += k
			off += int64(k)
			continue
		}
		i := searchRun(v.Runs, off)
		r := v.Runs[i]
		k := min(int64(len(p)-done), r.Off+r.Len-off)
		if _, err := src.ReadAt(p[done:done+int(k)], r.SrcOff+off-r.Off); err != nil {
			return done, err
		}
		done += int(k)
		off += k
	}
	if done < len(p) {
		return done, io.EOF
	}
	return done, nil
}

// searchRun returns the run that holds off.
func searchRun(runs []Run, off int64) int {
	lo, hi := 0, len(runs)
	for lo < hi {
		m := (lo + hi) / 2
		if runs[m].Off+runs[m].Len <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
