package mlx

import (
	"errors"
	"fmt"
	"math"
)

// Tensor is a tensor in memory as the engine hands it to its writer: a
// buffer, a shape, strides in elements (as mlx_array_strides gives them) and
// a dtype. The element at index (i0, …, ik) starts at byte
// (Σ ij·Strides[j]) × itemSize of Data. Nil Strides mean row-major
// contiguous. Strides must not be negative.
type Tensor struct {
	Data    []byte
	Shape   []int64
	Strides []int64
	DType   DType
}

// Contiguous returns a row-major tensor over b.
func Contiguous(b []byte, dtype DType, shape ...int64) Tensor {
	return Tensor{Data: b, Shape: shape, DType: dtype}
}

// layout is a validated view of a Tensor, ready to gather.
type layout struct {
	t       Tensor
	strides []int64
	item    int64
	size    int64 // elements
	run     int64 // elements in the contiguous suffix of axes
}

// prepare checks that t's extent lies inside t.Data and finds its
// contiguous suffix: axes join while their size is 1 or their stride equals
// the run so far (FORMAT.md §6.2).
func (t Tensor) prepare() (*layout, error) {
	if !t.DType.Valid() {
		return nil, fmt.Errorf("unknown dtype %d", t.DType)
	}
	l := &layout{t: t, item: int64(t.DType.Size())}
	size, ok := elements(t.Shape)
	if !ok || size > math.MaxInt64/l.item {
		return nil, fmt.Errorf("invalid shape %v", t.Shape)
	}
	l.size = size
	l.strides = t.Strides
	if l.strides == nil {
		l.strides = make([]int64, len(t.Shape))
		s := int64(1)
		for i := len(t.Shape) - 1; i >= 0; i-- {
			l.strides[i] = s
			s *= t.Shape[i]
		}
	}
	if len(l.strides) != len(t.Shape) {
		return nil, fmt.Errorf("%d strides for a rank-%d shape", len(l.strides), len(t.Shape))
	}
	if size == 0 {
		return l, nil
	}
	var last int64 // index of the last element reached
	for i, d := range t.Shape {
		st := l.strides[i]
		if st < 0 {
			return nil, errors.New("negative strides are not supported")
		}
		if d > 1 && st > (math.MaxInt64-last)/(d-1) {
			return nil, fmt.Errorf("strides %v overflow", l.strides)
		}
		last += (d - 1) * st
	}
	if need := (last + 1) * l.item; last+1 > math.MaxInt64/l.item || need > int64(len(t.Data)) {
		return nil, fmt.Errorf("shape %v with strides %v needs %d bytes, buffer has %d", t.Shape, l.strides, need, len(t.Data))
	}
	l.run = 1
	for axis := len(t.Shape) - 1; axis >= 0 && (t.Shape[axis] == 1 || l.strides[axis] == l.run); axis-- {
		l.run *= t.Shape[axis]
	}
	return l, nil
}

// elementOffset is the memory offset, in elements, of logical element i.
func (l *layout) elementOffset(i int64) int64 {
	var off int64
	for ax := len(l.t.Shape) - 1; ax >= 0; ax-- {
		d := l.t.Shape[ax]
		off += (i % d) * l.strides[ax]
		i /= d
	}
	return off
}

// span returns the bytes of elements [start, start+count) in row-major
// order: a slice of Data when they lie in one contiguous run, otherwise
// gathered into scratch (grown as needed). copied reports a gather.
func (l *layout) span(start, count int64, scratch *[]byte) (b []byte, copied bool) {
	if count <= l.run-start%l.run {
		off := l.elementOffset(start) * l.item
		return l.t.Data[off : off+count*l.item], false
	}
	n := count * l.item
	if int64(cap(*scratch)) < n {
		*scratch = make([]byte, n)
	}
	b = (*scratch)[:n]
	for done := int64(0); done < count; {
		i := start + done
		k := min(count-done, l.run-i%l.run)
		off := l.elementOffset(i) * l.item
		copy(b[done*l.item:], l.t.Data[off:off+k*l.item])
		done += k
	}
	return b, true
}
