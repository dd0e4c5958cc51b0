package chunker

import (
	"errors"
	"fmt"
	"math/bits"
)

// Params are a chunker's sizes: no chunk is shorter than Min (unless the
// data ends first) or longer than Max, and chunks average about Avg,
// which must be a power of two with Min < Avg < Max.
type Params struct {
	Min, Avg, Max int
}

// ForAverage returns the parameters for chunks averaging avg bytes (a
// power of two): Min avg/4, Max 4 avg.
func ForAverage(avg int) Params { return Params{Min: avg / 4, Avg: avg, Max: 4 * avg} }

// Validate reports whether p can cut.
func (p Params) Validate() error {
	if p.Avg <= 0 || p.Avg&(p.Avg-1) != 0 || p.Avg < 256 {
		return fmt.Errorf("chunker: average %d is not a power of two of at least 256", p.Avg)
	}
	if p.Min <= 0 || p.Min >= p.Avg || p.Max <= p.Avg {
		return fmt.Errorf("chunker: sizes %d/%d/%d are not 0 < min < average < max", p.Min, p.Avg, p.Max)
	}
	return nil
}

// ErrParams is returned for parameters that fail Validate.
var ErrParams = errors.New("chunker: bad parameters")

// masks returns the hash bits that must be zero for a cut before Avg
// (strict) and from Avg on (loose): log2(Avg) ± 2 of the top bits.
func (p Params) masks() (strict, loose uint64) {
	k := bits.Len(uint(p.Avg)) - 1
	return topBits(k + 2), topBits(k - 2)
}

func topBits(n int) uint64 {
	if n <= 0 {
		return 0
	}
	return ^uint64(0) << (64 - n)
}

// Cut returns the length of the first chunk of data: a content-defined
// cut, or len(data) if data is no longer than Min, or Max if no cut falls
// before it. A caller cutting a stream gives Cut at least Max bytes until
// the stream ends; fewer bytes may cut shorter than the whole stream would.
func (p Params) Cut(data []byte) int {
	n := len(data)
	if n <= p.Min {
		return n
	}
	strict, loose := p.masks()
	end := min(n, p.Max)
	normal := min(end, p.Avg)
	var h uint64
	i := p.Min
	for ; i < normal; i++ {
		h = h<<1 + gear[data[i]]
		if h&strict == 0 {
			return i + 1
		}
	}
	for ; i < end; i++ {
		h = h<<1 + gear[data[i]]
		if h&loose == 0 {
			return i + 1
		}
	}
	return end
}

// Cuts returns the ends of the chunks of data cut whole, in order; the
// last is len(data) (none for empty data).
func (p Params) Cuts(data []byte) []int {
	var ends []int
	for off := 0; off < len(data); {
		off += p.Cut(data[off:])
		ends = append(ends, off)
	}
	return ends
}
