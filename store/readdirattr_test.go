package store_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestReadDirAttr: the listing with attributes describes every entry, in
// name order, as LookupAttr does (with the entry's name); LookupAttrs
// does the same for the names asked for, nil for a name not there; and a
// directory that is not there is an error.
func TestReadDirAttr(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	d, err := s.MkdirAt(manifest.RootIno, "d", 0o755, store.Owner{UID: 7, GID: 8})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 50 {
		name := fmt.Sprintf("e\xff%02d", 49-i)
		if i%5 == 0 {
			_, err = s.MkdirAt(d.Ino, name, 0o700, store.Owner{UID: uint32(i)})
		} else {
			_, err = s.CreateAt(d.Ino, name, 0o640, store.Owner{GID: uint32(i)})
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	put(t, s, "d/e\xff00", randBytes(10000, 1)) // a committed file, replaced
	ents, err := s.ReadDirAttr(d.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(names) {
		t.Fatalf("%d entries, want %d", len(ents), len(names))
	}
	for i, fi := range ents {
		if i > 0 && ents[i-1].Name >= fi.Name {
			t.Errorf("%q listed after %q: not in name order", fi.Name, ents[i-1].Name)
		}
		want, err := s.LookupAttr(d.Ino, fi.Name)
		if err != nil {
			t.Fatal(err)
		}
		want.Name = fi.Name
		if !reflect.DeepEqual(fi, want) {
			t.Errorf("ReadDirAttr %+v\nLookupAttr %+v", fi, want)
		}
	}
	got, err := s.LookupAttrs(d.Ino, []string{"e\xff07", "missing", "e\xff00"})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"e\xff07", "", "e\xff00"} {
		if name == "" {
			if got[i] != nil {
				t.Errorf("LookupAttrs of a missing name: %+v", got[i])
			}
			continue
		}
		want, _ := s.LookupAttr(d.Ino, name)
		want.Name = name
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("LookupAttrs %q: %+v, want %+v", name, got[i], want)
		}
	}
	if _, err := s.ReadDirAttr(1 << 40); err == nil {
		t.Error("ReadDirAttr of a directory that is not there succeeded")
	}
}
