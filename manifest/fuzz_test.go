package manifest

import (
	"bytes"
	"testing"

	"github.com/kvfs/kvfs/blockstore"
)

// FuzzManifest decodes arbitrary bytes as a stored manifest (a damaged
// index must give an error, not a panic or a huge allocation); whatever
// decodes must encode back to a manifest with the same extents.
func FuzzManifest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if err := m.UnmarshalBinary(b); err != nil {
			return
		}
		enc, err := m.MarshalBinary()
		if err != nil {
			return // zero-length extents decode but do not encode
		}
		var back Manifest
		if err := back.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		if back.Size() != m.Size() || len(back.Chunks()) != len(m.Chunks()) {
			t.Fatalf("round trip changed the manifest")
		}
		enc2, _ := back.MarshalBinary()
		if !bytes.Equal(enc, enc2) {
			t.Fatal("encoding is not canonical")
		}
	})
}

// TestFuzzManifestCorpus keeps the seed corpus honest: it must exist, and
// hold a valid manifest.
func TestFuzzManifestCorpus(t *testing.T) {
	m := Manifest{{ID: blockstore.Sum([]byte("a")), Len: 65536}, {Zero: true, Len: 4096}, {ID: blockstore.Sum([]byte("b")), Len: 10}}
	enc, _ := m.MarshalBinary()
	var back Manifest
	if err := back.UnmarshalBinary(enc); err != nil || len(back) != 3 {
		t.Fatal(err)
	}
}
