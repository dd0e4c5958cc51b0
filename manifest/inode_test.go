package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// oddNames are names that are bytes, not text: every byte value a name may
// hold, invalid UTF-8, the longest names.
func oddNames() []string {
	var all []byte
	for c := 1; c < 256; c++ {
		if c != '/' {
			all = append(all, byte(c))
		}
	}
	names := []string{string(all), "caf\xe9.mlxkv", strings.Repeat("\xff", 255), strings.Repeat("é", 127) + "\xe9", "\xed\xa0\x80", "\xef\xbf\xbd"}
	for c := 1; c < 256; c++ {
		if c != '/' {
			names = append(names, "n"+string([]byte{byte(c)}))
		}
	}
	return names
}

// xattrName is an attribute name holding name's bytes, cut to the
// longest xattr name.
func xattrName(name string) string {
	x := "user." + name
	return x[:min(len(x), 255)]
}

func fullInode(name string) *Inode {
	val := make([]byte, 256)
	for i := range val {
		val[i] = byte(i)
	}
	return &Inode{Ino: 7, Mode: fs.ModeDir | fs.ModeSetgid | 0o751, Size: math.MaxInt64, Mtime: -1, Ctime: math.MinInt64,
		UID: math.MaxUint32, GID: 1, Parent: math.MaxUint64, Name: name, ManifestID: "blake3-00", Kind: "mlxkv",
		Note: "bad header: \xff", Blob: strings.Repeat("a", 64), Layout: "\x00\x01layout",
		Xattrs: map[string][]byte{xattrName(name): val, "user.a/b": {}, "user.\x80": []byte("x")}}
}

func TestInodeRoundTrip(t *testing.T) {
	for _, name := range oddNames() {
		for _, n := range []*Inode{fullInode(name), {Ino: 7, Name: name}} {
			b, err := marshalInode(n)
			if err != nil {
				t.Fatalf("encode %q: %v", name, err)
			}
			got, err := unmarshalInode(7, b)
			if err != nil {
				t.Fatalf("decode %q: %v", name, err)
			}
			if !reflect.DeepEqual(got, n) {
				t.Fatalf("round trip of %q:\n got %+v\nwant %+v", name, got, n)
			}
			if again, _ := marshalInode(got); !bytes.Equal(again, b) {
				t.Fatalf("encoding of %q is not canonical", name)
			}
		}
	}
	// The zero inode is the version byte alone.
	if b, err := marshalInode(&Inode{}); err != nil || !bytes.Equal(b, []byte{inodeV1}) {
		t.Fatalf("zero inode: %x %v", b, err)
	}
}

// TestInodeNamesInDB stores odd names through the index and reads them back
// after reopening, by inode and through the directory entry.
func TestInodeNamesInDB(t *testing.T) { inBothModes(t, testInodeNamesInDB) }

func testInodeNamesInDB(t *testing.T, open opener) {
	path := filepath.Join(t.TempDir(), "kvfs.db")
	db, err := open(path, true, Params{ChunkSize: 4096}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	names := oddNames()
	inos := map[string]uint64{}
	err = db.Update(func(tx *Tx) error {
		for _, name := range names {
			ino, _ := tx.NextIno()
			inos[name] = ino
			if err := tx.PutInode(&Inode{Ino: ino, Mode: 0o644, Parent: RootIno, Name: name, Xattrs: map[string][]byte{xattrName(name): []byte(name)}}); err != nil {
				return err
			}
			if err := tx.Link(RootIno, name, ino); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = open(path, false, Params{}, time.Second); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *Tx) error {
		for _, name := range names {
			n, err := tx.Inode(inos[name])
			if err != nil {
				return err
			}
			if n.Name != name || string(n.Xattrs[xattrName(name)]) != name {
				t.Errorf("name %q came back as %q", name, n.Name)
			}
			if ino, err := tx.Lookup(n.Parent, n.Name); err != nil || ino != n.Ino {
				t.Errorf("lookup of %q by its inode's name: %d %v", name, ino, err)
			}
		}
		ents, _ := tx.ReadDir(RootIno)
		if len(ents) != len(names) {
			t.Errorf("%d entries, want %d", len(ents), len(names))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// legacyInode is a record as kvfs wrote it before the binary encoding
// (json.Marshal of the Inode), for a file whose name was valid UTF-8.
const legacyInode = `{"mode":420,"size":100000,"mtime":1700000000000000000,"ctime":1700000000000000001,"uid":1000,"gid":100,` +
	`"xattrs":{"user.k":"dmFsdWU="},"manifestId":"blake3-ab","kind":"plain","parent":1,"name":"café.mlxkv"}`

func TestInodeLegacyJSON(t *testing.T) { inBothModes(t, testInodeLegacyJSON) }

func testInodeLegacyJSON(t *testing.T, open opener) {
	n, err := unmarshalInode(9, []byte(legacyInode))
	if err != nil {
		t.Fatal(err)
	}
	want := &Inode{Ino: 9, Mode: 0o644, Size: 100000, Mtime: 1700000000000000000, Ctime: 1700000000000000001, UID: 1000, GID: 100,
		Xattrs: map[string][]byte{"user.k": []byte("value")}, ManifestID: "blake3-ab", Kind: "plain", Parent: 1, Name: "café.mlxkv"}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("legacy record:\n got %+v\nwant %+v", n, want)
	}
	// A store made before keeps working: the record is read in place and
	// rewritten in binary when it changes.
	path := filepath.Join(t.TempDir(), "kvfs.db")
	db, err := open(path, true, Params{ChunkSize: 4096}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *Tx) error {
		if err := tx.b(bucketInodes).Put(u64key(9), []byte(legacyInode)); err != nil {
			return err
		}
		n, err := tx.Inode(9)
		if err != nil {
			return err
		}
		n.Size = 5
		return tx.PutInode(n)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *Tx) error {
		if v := tx.b(bucketInodes).Get(u64key(9)); len(v) == 0 || v[0] != inodeV1 {
			t.Errorf("rewritten record %q", v)
		}
		if n, err := tx.Inode(9); err != nil || n.Size != 5 || n.Name != "café.mlxkv" || string(n.Xattrs["user.k"]) != "value" {
			t.Errorf("rewritten inode %+v %v", n, err)
		}
		return nil
	})
}

func TestInodeBadRecords(t *testing.T) {
	good, err := marshalInode(fullInode("caf\xe9"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, b []byte) {
		t.Helper()
		n, err := unmarshalInode(42, b)
		if err == nil {
			t.Errorf("%s: decoded %+v", what, n)
			return
		}
		if !errors.Is(err, ErrBadInode) || !strings.Contains(err.Error(), "inode 42") {
			t.Errorf("%s: error %v does not name the inode", what, err)
		}
	}
	// Every truncation of a record fails: the last field is length-checked.
	for i := 1; i < len(good); i++ {
		if _, err := unmarshalInode(42, good[:i]); err == nil && i > 1 {
			// A cut exactly between fields is a shorter valid record;
			// it must then encode back to itself.
			n, _ := unmarshalInode(42, good[:i])
			if b, _ := marshalInode(n); !bytes.Equal(b, good[:i]) {
				t.Errorf("prefix %d decodes to a different record", i)
			}
		}
	}
	check("truncated inside a field", good[:len(good)-1])
	u32 := func(v byte) []byte { return []byte{0, 0, 0, v} }
	rec := func(fields ...[]byte) []byte { return append([]byte{inodeV1}, bytes.Join(fields, nil)...) }
	field := func(tag byte, v []byte) []byte { return append([]byte{tag, byte(len(v))}, v...) }
	cases := map[string][]byte{
		"empty":                nil,
		"unknown version":      {2, tagMode, 4, 0, 0, 1, 0xa4},
		"unknown field":        rec(field(200, []byte("x"))),
		"fields out of order":  rec(field(tagGID, u32(1)), field(tagUID, u32(1))),
		"duplicate field":      rec(field(tagUID, u32(1)), field(tagUID, u32(2))),
		"zero value":           rec(field(tagUID, u32(0))),
		"empty text":           rec(field(tagKind, nil)),
		"short integer":        rec(field(tagSize, []byte{1, 2, 3})),
		"negative size":        rec(field(tagSize, []byte{0x80, 0, 0, 0, 0, 0, 0, 1})),
		"overlong length":      rec([]byte{tagKind, 0x81, 0x00, 'a'}),
		"huge length":          rec([]byte{tagNote, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'a'}),
		"length past end":      rec([]byte{tagName, 5, 'a', 'b'}),
		"name with slash":      rec(field(tagName, []byte("a/b"))),
		"name with NUL":        rec(field(tagName, []byte("a\x00b"))),
		"name too long":        rec(append([]byte{tagName, 0xfe, 0x05}, bytes.Repeat([]byte{'x'}, 3*255+1)...)), // 766 bytes
		"xattrs out of order":  rec(field(tagXattrs, []byte{3, 'u', '.', 'b', 0, 3, 'u', '.', 'a', 0})),
		"xattr twice":          rec(field(tagXattrs, []byte{3, 'u', '.', 'a', 0, 3, 'u', '.', 'a', 0})),
		"xattr empty name":     rec(field(tagXattrs, []byte{0, 0})),
		"xattr no value":       rec(field(tagXattrs, []byte{3, 'u', '.', 'a'})),
		"xattr value past end": rec(field(tagXattrs, []byte{1, 'u', 9, 'v'})),
		"bad legacy JSON":      []byte(`{"name":`),
	}
	for what, b := range cases {
		check(what, b)
	}
}

func TestInodeEncodeBounds(t *testing.T) {
	for what, n := range map[string]*Inode{
		"name over the limit": {Name: strings.Repeat("x", maxName+1)},
		"name with slash":     {Name: "a/b"},
		"name with NUL":       {Name: "a\x00"},
		"negative size":       {Size: -1},
		"xattr too large":     {Xattrs: map[string][]byte{"user.a": make([]byte, maxXattrValue+1)}},
		"empty xattr name":    {Xattrs: map[string][]byte{"": nil}},
		"xattr name too long": {Xattrs: map[string][]byte{strings.Repeat("u", maxXattrName+1): nil}},
	} {
		n.Ino = 5
		if _, err := marshalInode(n); !errors.Is(err, ErrBadInode) || !strings.Contains(err.Error(), "inode 5") {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// TestInodeLegacyMangledNames: the JSON records of stores made before the
// binary encoding hold U+FFFD for each invalid byte of a name, while the
// directory entries (bbolt keys) kept the bytes. Reading such a record
// recovers the name from its entry, and records whose mangled names grew
// past 255 bytes (a name, an xattr name) can still be written back: the
// directory they describe must stay changeable.
func TestInodeLegacyMangledNames(t *testing.T) { inBothModes(t, testInodeLegacyMangledNames) }

func testInodeLegacyMangledNames(t *testing.T, open opener) {
	raw := strings.Repeat("\xe9", 100) // 100 bytes; 300 as U+FFFD
	mangled := strings.Repeat("\uFFFD", 100)
	rec, err := json.Marshal(map[string]any{"mode": 0o40755, "parent": 1, "name": raw,
		"xattrs": map[string][]byte{"user." + raw: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rec), `\ufffd`) && !strings.Contains(string(rec), mangled) {
		t.Fatalf("json.Marshal kept the invalid bytes: %s", rec)
	}
	db, err := open(filepath.Join(t.TempDir(), "kvfs.db"), true, Params{ChunkSize: 4096}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *Tx) error {
		if err := tx.b(bucketInodes).Put(u64key(9), rec); err != nil {
			return err
		}
		if err := tx.Link(RootIno, raw, 9); err != nil {
			return err
		}
		n, err := tx.Inode(9)
		if err != nil {
			return err
		}
		if n.Name != raw {
			t.Errorf("name %q, want the entry's bytes %q", n.Name, raw)
		}
		n.Mtime = 7 // as touchDir does
		return tx.PutInode(n)
	})
	if err != nil {
		t.Fatalf("rewrite a legacy directory record: %v", err)
	}
	db.View(func(tx *Tx) error {
		n, err := tx.Inode(9)
		if err != nil || n.Name != raw || n.Mtime != 7 || string(n.Xattrs["user."+mangled]) != "v" {
			t.Errorf("rewritten record: %+v %v", n, err)
		}
		return nil
	})
}
