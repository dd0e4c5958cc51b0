package blockstore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestAppendReadPunch(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "packs"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := d.NewAppender(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunks := [][]byte{bytes.Repeat([]byte("a"), 5000), bytes.Repeat([]byte("b"), 9000), []byte("c")}
	var locs []Loc
	for _, c := range chunks {
		l, err := a.Append(c)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, l)
	}
	// Reserved space filled out of order, and from a file.
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("0123456789"), 0o600)
	sf, _ := os.Open(src)
	defer sf.Close()
	r1, r2 := a.Reserve(4), a.Reserve(3)
	if err := a.CopyFrom(sf, 5, r2.Off, 3); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteAt([]byte("wxyz"), r1.Off); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	for i, c := range chunks {
		got := make([]byte, len(c))
		if err := d.ReadChunk(got, Sum(c), locs[i], true); err != nil || !bytes.Equal(got, c) {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	got := make([]byte, 3)
	if _, err := d.ReadAt(got, r2, 0); err != nil || string(got) != "567" {
		t.Fatalf("copied range %q %v", got, err)
	}
	if _, err := d.ReadAt(got[:2], locs[1], 8999); err == nil {
		t.Fatal("read past the chunk end")
	}
	// A wrong id is reported as corruption, with the pack and offset.
	err = d.ReadChunk(make([]byte, 9000), Sum([]byte("x")), locs[1], true)
	var ce *ChunkError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Loc != locs[1] {
		t.Fatalf("corrupt read: %v", err)
	}
	// Punching keeps the size and other chunks.
	if err := d.Punch(1, []Loc{locs[1]}); err != nil {
		t.Fatal(err)
	}
	sizes, _ := d.Packs()
	if sizes[1] != r2.End() {
		t.Fatalf("pack size %d after punch, want %d", sizes[1], r2.End())
	}
	if err := d.ReadChunk(make([]byte, 5000), Sum(chunks[0]), locs[0], true); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadChunk(make([]byte, 9000), Sum(chunks[1]), locs[1], true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("punched chunk verified: %v", err)
	}
	// A pack truncated under the index: short, not silently zero.
	if err := d.Truncate(1, 100); err != nil {
		t.Fatal(err)
	}
	d.Remove(1) // drop the cached descriptor too
	if _, err := d.ReadAt(make([]byte, 10), locs[0], 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read from a removed pack: %v", err)
	}
	// Reopening for append cuts an uncommitted tail.
	a, _ = d.NewAppender(2, 0)
	a.Append([]byte("committed"))
	a.Sync()
	a.Append([]byte("uncommitted tail"))
	a.Sync()
	a.Close()
	a, err = d.NewAppender(2, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if sizes, _ := d.Packs(); sizes[2] != 9 || a.Size() != 9 {
		t.Fatalf("tail not cut: %d", sizes[2])
	}
}

func TestParseID(t *testing.T) {
	id := Sum([]byte("abc"))
	p, err := ParseID(id.String())
	if err != nil || p != id || len(id.Short()) != 12 {
		t.Fatal(p, err)
	}
	for _, bad := range []string{"", "xyz", id.String()[:63], id.String()[:62] + "zz"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) succeeded", bad)
		}
	}
}
