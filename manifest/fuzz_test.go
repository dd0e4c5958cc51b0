package manifest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
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

// FuzzInode decodes arbitrary bytes as an inode record: a damaged or
// hostile index must give an error naming the inode, never a panic or a
// huge allocation. A binary record that decodes must encode back to the
// same bytes (the encoding is canonical); a legacy JSON record must encode
// to a binary record that decodes to the same inode. The input is also
// used as a name, an attribute name and value, which must round-trip
// byte for byte whenever the encoder accepts them.
func FuzzInode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := unmarshalInode(3, b)
		if err != nil {
			if !errors.Is(err, ErrBadInode) || !strings.Contains(err.Error(), "inode 3") {
				t.Fatalf("error does not name the inode: %v", err)
			}
		} else {
			enc, err := marshalInode(n)
			switch {
			case err != nil && b[0] != '{':
				t.Fatalf("decoded binary record does not encode: %v", err)
			case err == nil && b[0] != '{' && !bytes.Equal(enc, b):
				t.Fatalf("encoding is not canonical:\n in %q\nout %q", b, enc)
			case err == nil:
				back, err := unmarshalInode(3, enc)
				if err != nil {
					t.Fatalf("re-encoded inode does not decode: %v", err)
				}
				if len(n.Xattrs) == 0 {
					n.Xattrs = nil // omitted when empty
				}
				for k, v := range n.Xattrs {
					if v == nil {
						n.Xattrs[k] = []byte{} // legacy JSON null
					}
				}
				if !reflect.DeepEqual(back, n) {
					t.Fatalf("round trip changed the inode:\n got %+v\nwant %+v", back, n)
				}
			}
		}
		s := string(b)
		in := &Inode{Ino: 3, Name: s, Note: s, Parent: 1, Xattrs: map[string][]byte{"user." + s: b}}
		enc, err := marshalInode(in)
		if err != nil {
			if len(s) <= 250 && !strings.ContainsAny(s, "/\x00") {
				t.Fatalf("encoder refused a valid name %q: %v", s, err)
			}
			return
		}
		back, err := unmarshalInode(3, enc)
		if err != nil {
			t.Fatalf("encoded inode does not decode: %v", err)
		}
		if back.Name != s || back.Note != s || !bytes.Equal(back.Xattrs["user."+s], b) {
			t.Fatalf("name %q came back as %q", s, back.Name)
		}
	})
}

// TestFuzzInodeCorpus keeps the seed corpus honest: it must exist, and hold
// a legacy JSON record and binary records with odd names that decode.
func TestFuzzInodeCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzInode")
	for _, seed := range []string{"legacy-json", "binary-latin1-name", "binary-all-bytes-name", "binary-255-ff-name"} {
		raw, err := os.ReadFile(filepath.Join(dir, seed))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(raw)), "\n", 2)
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a fuzz corpus file", seed)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", seed, err)
		}
		if _, err := unmarshalInode(1, []byte(s)); err != nil {
			t.Errorf("%s: %v", seed, err)
		}
	}
}
