package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
)

// MaxHeaderLen bounds the JSON header Parse reads (the reference
// implementation's limit is 100 MB); a longer one is refused before it
// is read.
const MaxHeaderLen = 100 << 20

// dtypeSizes are the element sizes of the specification's dtypes.
var dtypeSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// ErrNotSafetensors: the bytes do not start like a safetensors file.
var ErrNotSafetensors = errors.New("not a safetensors file")

// Tensor is one tensor of a file.
type Tensor struct {
	Name     string
	DType    string
	Shape    []int64
	Off, End int64 // absolute file offsets of its bytes
}

// ElemSize is the bytes of one element.
func (t Tensor) ElemSize() int { return dtypeSizes[t.DType] }

// File is the layout of a safetensors file.
type File struct {
	HeaderLen int64
	Size      int64
	Tensors   []Tensor // by offset
	Metadata  map[string]string
}

// DataStart is where the tensors' bytes begin.
func (f *File) DataStart() int64 { return 8 + f.HeaderLen }

// Sniff reports whether b, the first bytes of a file of size bytes (at
// least 9 of them), start like a safetensors file: a header length that
// fits the file and a header that opens a JSON object.
func Sniff(b []byte, size int64) bool {
	if len(b) < 9 {
		return false
	}
	n := binary.LittleEndian.Uint64(b)
	return n >= 2 && n <= MaxHeaderLen && int64(n) <= size-8 && b[8] == '{'
}

// wireTensor is a tensor's entry in the header.
type wireTensor struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Parse reads the layout of the safetensors file src of size bytes; name
// is for errors.
func Parse(src io.ReaderAt, size int64, name string) (*File, error) {
	f, err := parse(src, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", name, err)
	}
	return f, nil
}

func parse(src io.ReaderAt, size int64) (*File, error) {
	var pre [9]byte
	if size < 9 {
		return nil, ErrNotSafetensors
	}
	if _, err := src.ReadAt(pre[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	if !Sniff(pre[:], size) {
		return nil, ErrNotSafetensors
	}
	f := &File{HeaderLen: int64(binary.LittleEndian.Uint64(pre[:])), Size: size}
	hb := make([]byte, f.HeaderLen)
	if n, err := src.ReadAt(hb, 8); int64(n) < f.HeaderLen {
		return nil, fmt.Errorf("read header: %d of %d bytes: %w", n, f.HeaderLen, err)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hb))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	// The header may be padded with spaces to align the data; nothing
	// else may follow the object.
	if rest := bytes.TrimRight(hb[dec.InputOffset():], " "); len(rest) > 0 {
		return nil, fmt.Errorf("header: %d bytes after the JSON object", len(rest))
	}
	dataLen := size - f.DataStart()
	for k, v := range raw {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &f.Metadata); err != nil {
				return nil, fmt.Errorf("header: __metadata__: %w", err)
			}
			continue
		}
		var w wireTensor
		if err := json.Unmarshal(v, &w); err != nil {
			return nil, fmt.Errorf("header: tensor %q: %w", k, err)
		}
		t := Tensor{Name: k, DType: w.DType, Shape: w.Shape}
		el, ok := dtypeSizes[w.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", k, w.DType)
		}
		n := uint64(el)
		for _, d := range w.Shape {
			hi, lo := bits.Mul64(n, uint64(d))
			if d < 0 || hi != 0 || lo > math.MaxInt64 {
				return nil, fmt.Errorf("tensor %q: shape %v too large", k, w.Shape)
			}
			n = lo
		}
		b, e := w.DataOffsets[0], w.DataOffsets[1]
		if b < 0 || e < b || e > dataLen || uint64(e-b) != n {
			return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] for %d bytes of shape %v %s in %d bytes of data",
				k, b, e, n, w.Shape, w.DType, dataLen)
		}
		t.Off, t.End = f.DataStart()+b, f.DataStart()+e
		f.Tensors = append(f.Tensors, t)
	}
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := f.Tensors[i], f.Tensors[j]
		return a.Off < b.Off || a.Off == b.Off && a.End < b.End
	})
	for i := 1; i < len(f.Tensors); i++ {
		if p, t := f.Tensors[i-1], f.Tensors[i]; t.Off < p.End {
			return nil, fmt.Errorf("tensors %q and %q overlap", p.Name, t.Name)
		}
	}
	return f, nil
}
