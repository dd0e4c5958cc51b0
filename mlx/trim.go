package mlx

import (
	"fmt"
)

// Extent is a byte range of a source tensor: Len bytes at offset Off of the
// logical bytes of the source's slot Slot (in Header.Slots order).
type Extent struct {
	Slot     int
	Off, Len int64
}

// Trimmed is a snapshot cut to a shorter token prefix: the header of the
// shorter snapshot, planned for the whole layout with placeholder hashes,
// and for each of its slots the source extents whose concatenation is that
// slot's bytes.
type Trimmed struct {
	Header  *Header
	Extents [][]Extent
}

// Trim cuts h to its first n tokens, as the engine trims a restored cache
// (FORMAT.md §7). n must not exceed any cache's offset or the token count,
// and must not be below any entry's minimumReusableOffset.
//
// kv, qkv and turboquant tensors are cut on axis 2, mla kinds on axis 1;
// rotating kinds are cut on axis 2 while their ring has not wrapped (offset
// < maxSize, so ring order is still token order) and get idx = n. A paged
// entry keeps its whole pool and page table and only lowers offset, as the
// engine's in-memory trim does: pages are addressed through the table, so
// the pool needs no cutting. ssm entries, wrapped rings, snapshots with
// attachments and generation checkpoints fail with ErrNotTrimmable.
func Trim(h *Header, n int64) (*Trimmed, error) {
	fail := func(check, format string, args ...any) (*Trimmed, error) {
		return nil, &FormatError{Check: check, Err: ErrNotTrimmable, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case n < 0 || n > int64(len(h.Tokens)):
		return fail("tokens", "cannot trim %d tokens to %d", len(h.Tokens), n)
	case h.Attachments != nil:
		return fail("attachments", "a snapshot with attachments is never trimmable")
	case h.GenerationCheckpoint != nil:
		return fail("generationCheckpoint", "a generation checkpoint is restored whole")
	}
	out := h.Clone()
	out.Tokens = out.Tokens[:n]
	var extents [][]Extent
	src := 0 // flattened index of the entry's first source slot
	for i := range out.Caches {
		e := &out.Caches[i]
		path := fmt.Sprintf("caches[%d]", i)
		if n > e.Offset {
			return fail(path+".offset", "entry covers %d tokens, fewer than %d", e.Offset, n)
		}
		if m := e.MinReusable(); n < m {
			return fail(path+".minimumReusableOffset", "%s entry is reusable from %d tokens, not %d", e.Kind, m, n)
		}
		axis := kindInfo[e.Kind].tokenAxis
		switch e.Kind {
		case KindSSM:
			return fail(path, "ssm state cannot be cut to a prefix")
		case KindRotating, KindRotatingQKV:
			if e.Offset >= e.MaxSize {
				return fail(path, "rotating ring has wrapped (offset %d, maxSize %d)", e.Offset, e.MaxSize)
			}
			e.Idx = n
		case KindPaged:
			axis = -1
		}
		for j := range e.Tensors {
			s := &e.Tensors[j]
			if axis < 0 {
				extents = append(extents, []Extent{{Slot: src + j, Len: s.Bytes}})
				continue
			}
			ext, err := cutAxis(s, axis, e.Offset, n, src+j)
			if err != nil {
				return fail(fmt.Sprintf("%s.tensors[%d]", path, j), "%v", err)
			}
			extents = append(extents, ext)
		}
		e.Offset = n
		src += len(e.Tensors)
	}
	if _, _, err := PlanWhole(out); err != nil {
		return nil, err
	}
	return &Trimmed{Header: out, Extents: extents}, nil
}

// cutAxis keeps the first n entries of axis in slot s (shape updated) and
// returns the source extents of the result, merged where they touch.
// Rotating rings may hold more than offset rows; other kinds exactly offset.
func cutAxis(s *Slot, axis int, offset, n int64, slot int) ([]Extent, error) {
	if len(s.Shape) <= axis {
		return nil, fmt.Errorf("rank-%d tensor has no token axis %d", len(s.Shape), axis)
	}
	rows := s.Shape[axis]
	if rows < offset {
		return nil, fmt.Errorf("axis %d holds %d tokens, fewer than offset %d", axis, rows, offset)
	}
	outer, _ := elements(s.Shape[:axis])
	inner, _ := elements(s.Shape[axis+1:])
	inner *= int64(s.DType.Size())
	var out []Extent
	for o := int64(0); o < outer && n > 0; o++ {
		off := o * rows * inner
		if k := len(out) - 1; k >= 0 && out[k].Off+out[k].Len == off {
			out[k].Len += n * inner
			continue
		}
		out = append(out, Extent{Slot: slot, Off: off, Len: n * inner})
	}
	s.Shape[axis] = n
	s.Bytes = outer * n * inner
	return out, nil
}
