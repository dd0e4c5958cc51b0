package llamastate_test

import (
	"bytes"
	"testing"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// FuzzParse: a parse of hostile bytes fails or returns blocks that lie in
// order inside the file and end it; it never panics or reads out of
// bounds. The seed corpus (testdata/fuzz/FuzzParse) holds small files of
// every shape.
func FuzzParse(f *testing.F) {
	for _, s := range specs {
		f.Add(llamastatetest.Write(s, tokens(3)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := llamastate.Parse(bytes.NewReader(b), int64(len(b)), "fuzz")
		if err != nil {
			return
		}
		checkCover(t, st)
		_ = st.Key()
	})
}
