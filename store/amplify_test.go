package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/manifest"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// bigHeaderSnapshot writes a whole-layout snapshot of a 4-token cache
// whose header lists n tokens, as a hostile or buggy writer might.
func bigHeaderSnapshot(t *testing.T, n int) []byte {
	t.Helper()
	h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(4, 1))
	h.Tokens = snapgen.Tokens(n, 2)
	path := filepath.Join(t.TempDir(), "big.mlxkv")
	if _, _, err := (&mlx.Writer{}).Write(path, h, tensors); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mlx.Parse(bytes.NewReader(b), int64(len(b)), path); err != nil {
		t.Fatalf("the snapshot must be valid: %v", err)
	}
	return b
}

// TestSnapshotTokenCap: a snapshot with more tokens than the cap is stored
// as a plain file, byte-exact, with the reason noted; one within the cap
// is indexed.
func TestSnapshotTokenCap(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{MaxSnapshotTokens: 1000}})
	for _, c := range []struct {
		tokens int
		kind   string
	}{{1000, "mlxkv"}, {1001, "plain"}} {
		b := bigHeaderSnapshot(t, c.tokens)
		p := fmt.Sprintf("ns/%d.mlxkv", c.tokens)
		st := put(t, s, p, b)
		if st.Kind != c.kind {
			t.Errorf("%d tokens: stored as %q (%s), want %q", c.tokens, st.Kind, st.Note, c.kind)
		}
		if c.kind == "plain" && !strings.Contains(st.Note, "1001 tokens, over the cap of 1000") {
			t.Errorf("note %q does not name the cap", st.Note)
		}
		if !bytes.Equal(get(t, s, p), b) {
			t.Errorf("%s reads back wrong", p)
		}
	}
}

// TestSnapshotHeaderCap: a header longer than the caps allow is refused
// before it is parsed.
func TestSnapshotHeaderCap(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{MaxSnapshotTokens: 10, MaxSnapshotBlockRefs: 10}})
	b := bigHeaderSnapshot(t, 300_000) // about 2 MiB of header
	st := put(t, s, "ns/big.mlxkv", b)
	if st.Kind != "plain" || !strings.Contains(st.Note, "header of") {
		t.Fatalf("stored as %q (%s), want plain for its header's length", st.Kind, st.Note)
	}
	if !bytes.Equal(get(t, s, "ns/big.mlxkv"), b) {
		t.Fatal("reads back wrong")
	}
}

// TestSnapshotBlockRefCap: a format-5 manifest listing more block
// references than the cap is stored as a plain file and pins nothing.
func TestSnapshotBlockRefCap(t *testing.T) {
	dir := t.TempDir()
	m := snapgen.Model{ID: "test/refs", Layers: 1, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}
	h, tensors := m.Snapshot(snapgen.Tokens(8, 1))
	// 2-byte blocks: one per element, 2 tensors x 8 tokens x 4 = 64 refs.
	out, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 2}).Write(filepath.Join(dir, "m.mlxkv"), h, tensors)
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for _, sl := range out.Slots() {
		refs += len(sl.Blocks)
	}
	if refs != 64 {
		t.Fatalf("%d refs", refs)
	}
	for _, c := range []struct {
		cap  int
		kind string
	}{{64, "mlxkv"}, {63, "plain"}} {
		s := storetest.New(t, storetest.Options{ChunkSize: 4096, Store: store.Options{MaxSnapshotBlockRefs: c.cap}})
		_, st, err := s.PutFile(ctx, filepath.Join(dir, "m.mlxkv"), "ns/m.mlxkv", store.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind != c.kind {
			t.Errorf("cap %d: stored as %q (%s), want %q", c.cap, st.Kind, st.Note, c.kind)
		}
		if c.kind == "plain" && !strings.Contains(st.Note, "64 block references, over the cap of 63") {
			t.Errorf("note %q does not name the cap", st.Note)
		}
	}
}

// TestXattrLimits: a value over 64 KiB is E2BIG's error; names past what
// listxattr can return, or names and values past the total, are
// ENOSPC's; removing makes room again.
func TestXattrLimits(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	put(t, s, "f", []byte("x"))
	fi, err := s.Stat("f")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetXattr(fi.Ino, "user.big", make([]byte, store.MaxXattrValue+1), 0); !errors.Is(err, store.ErrXattrTooBig) {
		t.Fatalf("value of 64 KiB + 1: %v, want ErrXattrTooBig", err)
	}
	// Values: 64 KiB each, until the total is reached.
	val := make([]byte, store.MaxXattrValue)
	n := 0
	for ; n < 100; n++ {
		err := s.SetXattr(fi.Ino, fmt.Sprintf("user.v%d", n), val, 0)
		if errors.Is(err, store.ErrXattrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != store.MaxXattrBytes/(store.MaxXattrValue+8) {
		t.Fatalf("%d values of 64 KiB fit, want %d", n, store.MaxXattrBytes/(store.MaxXattrValue+8))
	}
	// Replacing one with a value of the same size fits.
	if err := s.SetXattr(fi.Ino, "user.v0", val, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := s.SetXattr(fi.Ino, fmt.Sprintf("user.v%d", i), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Names: until their list would not fit listxattr's buffer.
	names := 0
	for ; names < 6000; names++ {
		err := s.SetXattr(fi.Ino, fmt.Sprintf("user.%095d", names), []byte{}, 0)
		if errors.Is(err, store.ErrXattrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.Xattrs(fi.Ino)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, k := range list {
		total += len(k) + 1
	}
	if names == 6000 || total > store.MaxXattrNames || len(list) != names {
		t.Fatalf("%d names set (%d listed, %d bytes), want refusal before %d bytes", names, len(list), total, store.MaxXattrNames)
	}
}

// TestXattrsApart: attributes are kept apart from the inode record (a
// stat decodes none), move with a commit to the new version, go with the
// file, and legacy records' inline attributes are read and migrated.
func TestXattrsApart(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	put(t, s, "legacy", []byte("old"))
	put(t, s, "f", []byte("x"))
	fi, _ := s.Stat("f")
	leg, _ := s.Stat("legacy")
	if err := s.SetXattr(fi.Ino, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := manifest.Open(filepath.Join(dir, "kvfs.db"), false, manifest.Params{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *manifest.Tx) error {
		n, err := tx.Inode(fi.Ino)
		if err != nil {
			return err
		}
		if n.Xattrs != nil {
			return fmt.Errorf("inode record holds xattrs %v", n.Xattrs)
		}
		// A record as stores made before wrote it: inline attributes.
		n, err = tx.Inode(leg.Ino)
		if err != nil {
			return err
		}
		n.Xattrs = map[string][]byte{"user.old": []byte("inline")}
		return tx.PutInode(n)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storetest.MustCheck(t, s) })
	if v, err := s.Xattr(leg.Ino, "user.old"); err != nil || string(v) != "inline" {
		t.Fatalf("legacy inline xattr: %q, %v", v, err)
	}
	if err := s.SetXattr(leg.Ino, "user.new", []byte("apart"), 0); err != nil {
		t.Fatal(err)
	}
	// A new version of the file keeps both.
	nfi, _, err := s.CommitIno(ctx, leg.Ino, bytes.NewReader([]byte("new content")), 11, store.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names, err := s.Xattrs(nfi.Ino)
	if err != nil || strings.Join(names, ",") != "user.new,user.old" {
		t.Fatalf("after commit: %v, %v", names, err)
	}
	if v, err := s.Xattr(nfi.Ino, "user.old"); err != nil || string(v) != "inline" {
		t.Fatalf("after commit: %q, %v", v, err)
	}
	if err := s.Remove("legacy"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("f"); err != nil {
		t.Fatal(err)
	}
	// Check (at cleanup) flags attributes left behind by a removal.
}

// TestCheckFlagsOrphanXattrs: the checker reports attributes whose inode
// is gone.
func TestCheckFlagsOrphanXattrs(t *testing.T) {
	s := storetest.New(t, storetest.Options{})
	dir := s.Dir()
	storetest.MustCheck(t, s)
	db, err := manifest.Open(filepath.Join(dir, "kvfs.db"), false, manifest.Params{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *manifest.Tx) error { return tx.PutXattr(12345, "user.x", []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s2, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.Check(ctx, store.CheckOptions{})
	if err == nil || !strings.Contains(err.Error(), "extended attributes of inode 12345") {
		t.Fatalf("check: %v", err)
	}
}
