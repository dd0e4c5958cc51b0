package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvfs/kvfs/manifest"
)

// oddNames are names that are bytes, not text: each byte 0x80..0xff, the
// byte values 1..255 but '/', invalid UTF-8 at NAME_MAX.
func oddNames() []string {
	names := []string{"caf\xe9.mlxkv", strings.Repeat("\xff", 255), "\xed\xa0\x80", "a\\xe9"}
	var all []byte
	for c := 1; c < 256; c++ {
		if c != '/' {
			all = append(all, byte(c))
		}
	}
	names = append(names, string(all))
	for c := 0x80; c <= 0xff; c++ {
		names = append(names, "n"+string([]byte{byte(c)}))
	}
	return names
}

func randContent(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// commitBytes commits b as the content of inode ino, as the filesystem
// does when a writer closes.
func commitBytes(t *testing.T, s *Store, ino uint64, b []byte) (*FileInfo, error) {
	t.Helper()
	fi, _, err := s.CommitIno(context.Background(), ino, bytes.NewReader(b), int64(len(b)), CommitOptions{})
	return fi, err
}

func readAll(t *testing.T, s *Store, path string) []byte {
	t.Helper()
	f, err := s.Open(path)
	if err != nil {
		t.Fatalf("open %q: %v", path, err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
		t.Fatalf("read %q: %v", path, err)
	}
	return b
}

// TestCommitOddNames: a file whose name is not valid UTF-8 gets its
// content, whether it was created under that name or renamed to it, in
// the root or in a directory whose name is not UTF-8 either; its name
// comes back byte for byte.
func TestCommitOddNames(t *testing.T) {
	s, _ := newTestStore(t)
	dir, err := s.MkdirAt(manifest.RootIno, "d\xe9\xff", 0o755, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range oddNames() {
		for _, parent := range []uint64{manifest.RootIno, dir.Ino} {
			prefix := ""
			if parent == dir.Ino {
				prefix = "d\xe9\xff/"
			}
			fi, err := s.CreateAt(parent, name, 0o644, Owner{})
			if err != nil {
				t.Fatalf("create %q: %v", name, err)
			}
			want := randContent(5000+i, uint64(i))
			nfi, err := commitBytes(t, s, fi.Ino, want)
			if err != nil {
				t.Fatalf("commit %q: %v", name, err)
			}
			if nfi.Size != int64(len(want)) || nfi.Name != name {
				t.Fatalf("commit %q: %+v", name, nfi)
			}
			if got := readAll(t, s, prefix+name); !bytes.Equal(got, want) {
				t.Fatalf("%q reads back %d bytes, want %d", name, len(got), len(want))
			}
			// Renamed to an odd name, a file keeps later commits.
			tmp, err := s.CreateAt(parent, "tmp", 0o644, Owner{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RenameAt(parent, "tmp", parent, name, false); err != nil {
				t.Fatal(err)
			}
			want = randContent(7000, uint64(i)+1000)
			if _, err := commitBytes(t, s, tmp.Ino, want); err != nil {
				t.Fatalf("commit after rename to %q: %v", name, err)
			}
			if got := readAll(t, s, prefix+name); !bytes.Equal(got, want) {
				t.Fatalf("%q after rename reads back %d bytes, want %d", name, len(got), len(want))
			}
		}
	}
	for _, parent := range []string{"/", "d\xe9\xff"} {
		ents, err := s.List(parent)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, e := range ents {
			got[e.Name] = true
		}
		for _, name := range oddNames() {
			if !got[name] {
				t.Errorf("list %q lacks %q", parent, name)
			}
		}
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range oddNames() {
		if err := s.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestCommitUnlinkedWhileWritten: a file removed while it is written (its
// inode held, as the filesystem holds it) drops the written bytes.
func TestCommitUnlinkedWhileWritten(t *testing.T) {
	s, _ := newTestStore(t)
	fi, err := s.CreateAt(manifest.RootIno, "caf\xe9", 0o644, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(fi.Ino); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveAt(manifest.RootIno, "caf\xe9", false); err != nil {
		t.Fatal(err)
	}
	if _, err := commitBytes(t, s, fi.Ino, randContent(10000, 1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("commit of an unlinked file: %v", err)
	}
	s.Unhold(fi.Ino)
	if st, _ := s.Stats(); st.Files != 0 || st.Chunks != 0 {
		t.Fatalf("dropped content left %+v", st)
	}
	if err := s.Check(context.Background(), CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}

// TestCommitNameMismatch: an inode whose own name does not lead back to it
// (a damaged index) fails the commit with an error naming the inode and
// the name, escaped; it is never taken for a removed file.
func TestCommitNameMismatch(t *testing.T) {
	for _, damage := range []string{"no entry", "entry elsewhere"} {
		s, _ := newTestStore(t)
		fi, err := s.CreateAt(manifest.RootIno, "caf\xe9", 0o644, Owner{})
		if err != nil {
			t.Fatal(err)
		}
		other, err := s.CreateAt(manifest.RootIno, "other", 0o644, Owner{})
		if err != nil {
			t.Fatal(err)
		}
		err = s.db.Update(func(tx *manifest.Tx) error {
			if damage == "no entry" {
				return tx.Unlink(manifest.RootIno, "caf\xe9")
			}
			return tx.Link(manifest.RootIno, "caf\xe9", other.Ino)
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = commitBytes(t, s, fi.Ino, randContent(10000, 1))
		if err == nil || errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNameMismatch) {
			t.Fatalf("%s: commit: %v", damage, err)
		}
		msg := err.Error()
		if !utf8.ValidString(msg) || !strings.Contains(msg, `"caf\xe9"`) || !strings.Contains(msg, "inode 2") {
			t.Fatalf("%s: error does not name the inode and the escaped name: %s", damage, msg)
		}
		if err := s.Check(context.Background(), CheckOptions{}); err == nil || !strings.Contains(err.Error(), `named "caf\xe9"`) {
			t.Fatalf("%s: check: %v", damage, err)
		}
	}
}

// TestNULInName: no name holds NUL (the kernel never sends one; the
// control socket could): it is refused as invalid, not stored.
func TestNULInName(t *testing.T) {
	s, _ := newTestStore(t)
	if _, err := s.CreateAt(manifest.RootIno, "a\x00b", 0o644, Owner{}); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("create: %v", err)
	}
	if _, _, err := s.Put(context.Background(), bytes.NewReader([]byte("x")), 1, "d/a\x00b", PutOptions{}); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("put: %v", err)
	}
}
