package store_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// putBlocksSnapshot stores the engine's blocks-layout fixture of T tokens:
// its blocks, then its manifest, as the engine writes them.
func putBlocksSnapshot(t *testing.T, s *store.Store, dir, T string) *mlx.Snapshot {
	t.Helper()
	src := filepath.Join(fixtures, "blocks/fixture-fingerprint/base")
	manifest := filepath.Join(src, "00000000-0000-4000-8000-000000000"+T+".mlxkv")
	snap, err := mlx.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range snap.Header.Slots() {
		for _, b := range sl.Blocks {
			if _, _, err := s.PutFile(ctx, filepath.Join(src, "blocks", b.Hash), dir+"/blocks/"+b.Hash, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := s.PutFile(ctx, manifest, dir+"/"+T+".mlxkv", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestBlobLifecycle: a format-5 manifest pins its blocks, a removed pinned
// block keeps its content and can be looked up from another blocks
// directory, and unpinned blocks live out their grace period.
func TestBlobLifecycle(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 16384, Store: store.Options{BlobGrace: time.Minute}})
	snap := putBlocksSnapshot(t, s, "ns1", "300")
	h := snap.Header.Slots()[0].Blocks[0].Hash
	want, err := os.ReadFile(filepath.Join(fixtures, "blocks/fixture-fingerprint/base/blocks", h))
	if err != nil {
		t.Fatal(err)
	}
	// The engine's collect in another process removes a listed block.
	if err := s.Remove("ns1/blocks/" + h); err != nil {
		t.Fatal(err)
	}
	// Looking it up, here or in another namespace's blocks directory,
	// finds it again.
	if err := s.Mkdir("ns2/blocks", 0o700, true); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"ns1/blocks", "ns2/blocks"} {
		d, err := s.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := s.AdoptBlob(d.Ino, h, nil)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if got := get(t, s, dir+"/"+h); !bytes.Equal(got, want) || fi.Size != int64(len(want)) {
			t.Fatalf("%s/%s reads back wrong", dir, h)
		}
	}
	// Not a blob the store holds, or not a blocks directory: not found.
	d, _ := s.Stat("ns2/blocks")
	if _, err := s.AdoptBlob(d.Ino, sha256hex([]byte("nothing")), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unknown blob: %v", err)
	}
	root, _ := s.Stat("ns2")
	if _, err := s.AdoptBlob(root.Ino, h, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("blob outside a blocks directory: %v", err)
	}

	// Remove every name and the manifest: the blobs enter their grace
	// period, during which they can still be looked up.
	for _, dir := range []string{"ns1/blocks", "ns2/blocks"} {
		ents, _ := s.List(dir)
		for _, e := range ents {
			if err := s.Remove(dir + "/" + e.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Remove("ns1/300.mlxkv"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.StoredBytes == 0 {
		t.Fatal("blobs released before their grace period")
	}
	if n, err := s.ExpireBlobs(time.Now()); err != nil || n != 0 {
		t.Fatalf("expired %d blobs early (%v)", n, err)
	}
	// A manifest committed in the grace period pins them again.
	d1, _ := s.Stat("ns1/blocks")
	if _, err := s.AdoptBlob(d1.Ino, h, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ExpireBlobs(time.Now().Add(2 * time.Minute)); err != nil || n != 95 {
		t.Fatalf("expired %d blobs, want the 95 without names (%v)", n, err)
	}
	if err := s.Remove("ns1/blocks/" + h); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.ExpireBlobs(time.Now().Add(2 * time.Minute)); n != 1 {
		t.Fatalf("last blob: expired %d", n)
	}
	if st, _ := s.Stats(); st.StoredBytes != 0 || st.Chunks != 0 {
		t.Fatalf("after expiry: %+v", st)
	}
}

// TestManifestPinsDuringGrace: the engine's race — blocks written, a
// collect removes them before the manifest is in place, the manifest lands:
// every block still reads back.
func TestManifestPinsDuringGrace(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 16384})
	src := filepath.Join(fixtures, "blocks/fixture-fingerprint/base")
	manifest := filepath.Join(src, "00000000-0000-4000-8000-000000000400.mlxkv")
	snap, _ := mlx.ReadFile(manifest)
	for _, sl := range snap.Header.Slots() {
		for _, b := range sl.Blocks {
			p := "ns/blocks/" + b.Hash
			if _, _, err := s.PutFile(ctx, filepath.Join(src, "blocks", b.Hash), p, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			s.Remove(p) // the collect: no manifest lists it yet
		}
	}
	if _, _, err := s.PutFile(ctx, manifest, "ns/400.mlxkv", store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Far past the grace period: pinned blobs never expire.
	if n, _ := s.ExpireBlobs(time.Now().Add(24 * time.Hour)); n != 0 {
		t.Fatalf("expired %d pinned blobs", n)
	}
	d, _ := s.Stat("ns/blocks")
	for _, sl := range snap.Header.Slots() {
		for _, b := range sl.Blocks {
			if _, err := s.AdoptBlob(d.Ino, b.Hash, nil); err != nil {
				t.Fatal(err)
			}
			got := get(t, s, "ns/blocks/"+b.Hash)
			if sha256hex(got) != b.Hash {
				t.Fatalf("block %s reads back wrong", b.Hash)
			}
		}
	}
}

// TestEmptyBlobRename: a file created in a blocks directory and never
// written (committed empty at its creation, never hashed) may take the
// sha256 of no bytes as its name, and is then the empty blob, found from
// another blocks directory; no other sha256 name. A file with content
// that was not hashed as a blob still may not take the empty blob's name.
func TestEmptyBlobRename(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	empty := sha256hex(nil)
	for _, d := range []string{"a/blocks", "b/blocks"} {
		if err := s.Mkdir(d, 0o700, true); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := s.Stat("a/blocks")
	b, _ := s.Stat("b/blocks")
	if _, err := s.CreateAt(a.Ino, "e.tmp", 0o600, store.Owner{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("a/blocks/e.tmp", "a/blocks/"+sha256hex([]byte("x"))); !errors.Is(err, store.ErrBlobMismatch) {
		t.Fatalf("empty file renamed to another sha256: %v, want ErrBlobMismatch", err)
	}
	if err := s.Rename("a/blocks/e.tmp", "a/blocks/"+empty); err != nil {
		t.Fatal(err)
	}
	fi, err := s.Stat("a/blocks/" + empty)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.StatIno(fi.Ino); err != nil || st.Blob != empty {
		t.Fatalf("renamed empty file: blob %q (%v), want %s", st.Blob, err, empty)
	}
	if afi, err := s.AdoptBlob(b.Ino, empty, nil); err != nil || afi.Size != 0 {
		t.Fatalf("empty blob from another blocks directory: %+v, %v", afi, err)
	}
	// Content not hashed as a blob (written outside a blocks directory).
	put(t, s, "a/plain", []byte("not empty"))
	if err := s.Rename("a/plain", "a/blocks/"+empty); !errors.Is(err, store.ErrBlobMismatch) {
		t.Fatalf("a file with content renamed to the empty blob's name: %v, want ErrBlobMismatch", err)
	}
	if err := s.Check(ctx, store.CheckOptions{Verify: true}); err != nil {
		t.Fatal(err)
	}
}
