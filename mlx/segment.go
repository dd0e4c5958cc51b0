package mlx

import "iter"

// Span is a run of elements [Start, Start+Count) of a tensor's logical
// row-major element sequence.
type Span struct {
	Start, Count int64
}

// RowElements is the number of elements in one row of a tensor of the given
// shape: the product of its last two dimensions (the whole vector for rank
// 1, and 1 for rank 0). For [B,H,T,D] attention keys a row is one head's
// T×D plane, the unit that grows when the token count T grows.
func RowElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape[max(0, len(shape)-2):] {
		n *= d
	}
	return n
}

// Segments yields the engine's blocks of a tensor (FORMAT.md §4.2): every
// row is cut from its start into blocks of limit = max(1, blockBytes /
// itemSize) elements and a shorter tail, so a block never spans two rows and
// growing the token axis leaves every earlier full block unchanged. shape
// must be valid (non-negative, ∏shape representable), as Parse ensures.
func Segments(shape []int64, itemSize, blockBytes int64) iter.Seq[Span] {
	return func(yield func(Span) bool) {
		size, ok := elements(shape)
		if !ok || size == 0 {
			return
		}
		row := RowElements(shape)
		limit := max(1, blockBytes/itemSize)
		for start := int64(0); start < size; {
			count := min(limit, row-start%row, size-start)
			if !yield(Span{start, count}) {
				return
			}
			start += count
		}
	}
}
