package mlx

import (
	"fmt"
	"math"
	"slices"
)

// placeholderHash sizes the header before tensors are hashed: a v3+ tensor
// hash is always 16 hex digits, so the planned JSON has its final length.
const placeholderHash = "0000000000000000"

// PlanWhole lays h out as the engine's planner does (FORMAT.md §1, §4.4).
// It sets every slot's Bytes from its shape and dtype, its Off, and a
// placeholder Hash of the final width, and sets FormatVersion to 4 when h
// has attachments and 3 otherwise. It returns dataStart, computed from the
// planned header length, and the file size.
//
// Cache tensors start on 16 KiB boundaries, with a cursor running across
// every cache. Attachment tensors reproduce the engine's quirk: the first
// starts at the unaligned end of the last cache tensor, and each later one
// at the aligned end of the one before.
func PlanWhole(h *Header) (dataStart, size int64, err error) {
	h.FormatVersion = 3
	if h.Attachments != nil {
		h.FormatVersion = 4
	}
	var cursor, end int64
	place := func(name string, s *Slot, aligned bool) error {
		n, ok := elements(s.Shape)
		if !ok || !s.DType.Valid() || n > math.MaxInt64/int64(s.DType.Size()) {
			return fmt.Errorf("plan %s: invalid shape %v or dtype %d", name, s.Shape, s.DType)
		}
		s.Bytes = n * int64(s.DType.Size())
		s.Hash = placeholderHash
		s.Blocks = nil
		if aligned {
			s.Off = AlignUp(cursor)
			cursor = s.Off + s.Bytes
		} else {
			s.Off = cursor
			cursor = AlignUp(s.Off + s.Bytes)
		}
		if s.Bytes > 0 {
			end = max(end, s.Off+s.Bytes)
		}
		return nil
	}
	for i := range h.Caches {
		for j := range h.Caches[i].Tensors {
			if err := place(fmt.Sprintf("caches[%d].tensors[%d]", i, j), &h.Caches[i].Tensors[j], true); err != nil {
				return 0, 0, err
			}
		}
	}
	for i := range h.Attachments {
		for j := range h.Attachments[i].Tensors {
			if err := place(fmt.Sprintf("attachments[%d].tensors[%d]", i, j), &h.Attachments[i].Tensors[j], false); err != nil {
				return 0, 0, err
			}
		}
	}
	js, err := h.MarshalJSON()
	if err != nil {
		return 0, 0, err
	}
	dataStart = AlignUp(PrefixLen + int64(len(js)))
	return dataStart, dataStart + end, nil
}

// sameShape reports whether a tensor matches its planned slot.
func sameShape(s *Slot, t Tensor) bool {
	return s.DType == t.DType && slices.Equal(s.Shape, t.Shape)
}
