package mlx

import "fmt"

// DType is an mlx-c mlx_dtype id as stored in a tensor slot's "dtype"
// (FORMAT.md §2.4).
type DType int

// The mlx dtype ids. The engine's worker publishes only float32, float16,
// bfloat16, uint32, int32, uint8 and int8, but a reader accepts them all.
const (
	Bool DType = iota
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	Float16
	Float32
	Float64
	BFloat16
	Complex64
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Bool: {"bool", 1}, Uint8: {"uint8", 1}, Uint16: {"uint16", 2}, Uint32: {"uint32", 4},
	Uint64: {"uint64", 8}, Int8: {"int8", 1}, Int16: {"int16", 2}, Int32: {"int32", 4},
	Int64: {"int64", 8}, Float16: {"float16", 2}, Float32: {"float32", 4}, Float64: {"float64", 8},
	BFloat16: {"bfloat16", 2}, Complex64: {"complex64", 8},
}

// Valid reports whether d is a known dtype id.
func (d DType) Valid() bool { return d >= 0 && int(d) < len(dtypeInfo) }

// Size is the item size in bytes, or 0 for an unknown id.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeInfo[d].size
}

func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", int(d))
	}
	return dtypeInfo[d].name
}
