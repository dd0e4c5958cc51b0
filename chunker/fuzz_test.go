package chunker

import "testing"

// FuzzCut: for any bytes and any valid parameters, the cuts cover the
// bytes exactly, every chunk within the bounds, and a cut made from a
// window of Max bytes is the cut of the whole.
func FuzzCut(f *testing.F) {
	f.Add([]byte("hello, world"), uint16(1), uint8(8), uint16(700))
	f.Add(make([]byte, 5000), uint16(100), uint8(9), uint16(1000))
	f.Add(randBytes(20000, 7), uint16(64), uint8(8), uint16(1024))
	f.Fuzz(func(t *testing.T, data []byte, minSize uint16, avgLog uint8, maxSize uint16) {
		p := Params{Min: int(minSize), Avg: 1 << (avgLog % 20), Max: int(maxSize)}
		if p.Validate() != nil {
			return
		}
		ends := p.Cuts(data)
		checkCuts(t, p, data, ends)
		for off, i := 0, 0; off < len(data); i++ {
			n := p.Cut(data[off:min(len(data), off+p.Max)])
			if off+n != ends[i] {
				t.Fatalf("chunk %d: windowed cut ends at %d, whole at %d", i, off+n, ends[i])
			}
			off += n
		}
	})
}
