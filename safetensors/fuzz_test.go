package safetensors_test

import (
	"bytes"
	"testing"

	"github.com/kvfs/kvfs/safetensors"
	"github.com/kvfs/kvfs/safetensors/safetensorstest"
)

// FuzzParse: hostile bytes fail to parse or give tensors that lie inside
// the data, in order, without overlap; never a panic. The seed corpus is
// in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add(safetensorstest.PromptCache(safetensorstest.Spec{Layers: 1, Heads: 1, HeadDim: 4}, toks(3)))
	f.Add(header(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"__metadata__":{"k":"v"}}`, 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := safetensors.Parse(bytes.NewReader(b), int64(len(b)), "fuzz")
		if err != nil {
			return
		}
		end := st.DataStart()
		for _, tn := range st.Tensors {
			if tn.Off < end || tn.End < tn.Off || tn.End > st.Size {
				t.Fatalf("tensor %+v after %d in %d bytes", tn, end, st.Size)
			}
			end = tn.End
		}
	})
}
