package manifest

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestInodeAtime: the access time (tag 16) round-trips canonically at any
// value, is omitted when zero (then the modification time stands in), and
// its field is checked like every fixed-width one.
func TestInodeAtime(t *testing.T) {
	for _, at := range []int64{1, -1, 1700000000123456789, math.MinInt64, math.MaxInt64} {
		n := &Inode{Ino: 7, Mode: 0o644, Mtime: 5, Ctime: 6, Atime: at, Identity: 3, Name: "f"}
		b, err := marshalInode(n)
		if err != nil {
			t.Fatal(err)
		}
		// The atime is the last field, after the identity.
		want := binary.BigEndian.AppendUint64([]byte{tagAtime, 8}, uint64(at))
		if !bytes.HasSuffix(b, want) {
			t.Errorf("atime %d: record %x does not end with %x", at, b, want)
		}
		got, err := unmarshalInode(7, b)
		if err != nil {
			t.Fatalf("atime %d: %v", at, err)
		}
		if !reflect.DeepEqual(got, n) || got.AccessTime() != at {
			t.Errorf("atime %d: got %+v", at, got)
		}
		if again, _ := marshalInode(got); !bytes.Equal(again, b) {
			t.Errorf("atime %d: encoding not canonical", at)
		}
	}
	// Records without an atime (every record of an older store) read the
	// modification time as the access time.
	b, err := marshalInode(&Inode{Ino: 7, Mtime: 42})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1+2+8 { // the version and the mtime field alone
		t.Errorf("zero atime encoded: %x", b)
	}
	n, err := unmarshalInode(7, b)
	if err != nil || n.Atime != 0 || n.AccessTime() != 42 {
		t.Errorf("no atime field: %+v %v", n, err)
	}
	// Legacy JSON records may carry it too.
	if n, err := unmarshalInode(7, []byte(`{"mode":420,"mtime":3,"atime":9}`)); err != nil || n.Atime != 9 {
		t.Errorf("legacy JSON atime: %+v %v", n, err)
	}
	rec := func(fields ...[]byte) []byte { return append([]byte{inodeV1}, bytes.Join(fields, nil)...) }
	field := func(tag byte, v []byte) []byte { return append([]byte{tag, byte(len(v))}, v...) }
	u64 := func(x uint64) []byte { return binary.BigEndian.AppendUint64(nil, x) }
	for what, b := range map[string][]byte{
		"zero atime":           rec(field(tagAtime, u64(0))),
		"short atime":          rec(field(tagAtime, []byte{1, 2, 3, 4})),
		"atime twice":          rec(field(tagAtime, u64(1)), field(tagAtime, u64(2))),
		"identity after atime": rec(field(tagAtime, u64(1)), field(tagIdentity, u64(2))),
		"tag after atime":      rec(field(tagAtime, u64(1)), field(tagUseAge+1, u64(2))),
		"uses out of order":    rec(field(tagUses, u64(1)), field(tagLastUse, u64(2))),
	} {
		if n, err := unmarshalInode(7, b); err == nil {
			t.Errorf("%s: decoded %+v", what, n)
		}
	}
}

// TestFuzzInodeCorpusAtime: the seed corpus holds a record with an atime,
// so the fuzzer starts from the field.
func TestFuzzInodeCorpusAtime(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzInode", "binary-atime"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(strings.TrimSpace(string(raw)), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
		t.Fatal("binary-atime: not a fuzz corpus file")
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := unmarshalInode(1, []byte(s))
	if err != nil || n.Atime == 0 || n.Atime == n.Mtime {
		t.Fatalf("binary-atime: %+v %v", n, err)
	}
}

// TestInodeUses: the retention fields (store/recency.go) round-trip.
func TestInodeUses(t *testing.T) {
	n := &Inode{Ino: 7, Mode: 0o644, Atime: 5, LastUse: 9, Uses: 3, UseAge: 0x3ff0000000000000}
	b, err := marshalInode(n)
	if err != nil {
		t.Fatal(err)
	}
	m, err := unmarshalInode(7, b)
	if err != nil || m.LastUse != 9 || m.Uses != 3 || m.UseAge != n.UseAge || m.Atime != 5 {
		t.Fatalf("decoded %+v %v", m, err)
	}
}
