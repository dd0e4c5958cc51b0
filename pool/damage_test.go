package pool_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// TestCollectPassesOverDamage (red team 23): a name whose value is no
// manifest hash, a name whose manifest object is damaged, and a sparse
// pack with a damaged chunk each used to fail every collection that
// rewrote packs, so that the pool was never collected again. Now they are
// passed over (and counted): the other sparse packs are rewritten, the
// names that still read keep reading, and the damaged pack stays as it is.
func TestCollectPassesOverDamage(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	// x and w fill a pack each (16 chunks of 64 KiB); y and v share two
	// chunks of each, the rest of x and w go with their names.
	x, w := randBytes(1<<20, 31), randBytes(1<<20, 32)
	y := append(bytes.Clone(x[:128<<10]), randBytes(100_000, 33)...)
	v := append(bytes.Clone(w[:128<<10]), randBytes(90_000, 34)...)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"x", x}, {"y", y}, {"w", w}, {"v", v}} {
		if err := a.Publish(ctx, f.name, bytes.NewReader(f.b), int64(len(f.b))); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"x", "w"} {
		if err := a.Remove(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// Damage: a name that names no manifest; a name whose manifest
	// object's bytes are not its hash's; one byte of w's second chunk
	// (live through v) in its pack.
	if err := a.PutRawName(ctx, "not-a-manifest", "ffff"); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(s.dir, "s3", "kvfs", "pool")
	bad := []byte(`{"v":1,"size":0,"chunk_size":1048576,"chunks":[]}`)
	badSum := sha256.Sum256([]byte("something else"))
	if err := os.WriteFile(filepath.Join(root, "manifests", hex.EncodeToString(badSum[:])), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.PutRawName(ctx, "damaged-manifest", hex.EncodeToString(badSum[:])); err != nil {
		t.Fatal(err)
	}
	wPack := packOf(t, root, w[64<<10:128<<10])
	f, err := os.OpenFile(filepath.Join(root, "packs", wPack), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{^w[64<<10+5]}, 64<<10+5); err != nil {
		t.Fatal(err)
	}
	f.Close()

	st, err := a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.5})
	if err != nil {
		t.Fatalf("collect over damage: %v", err)
	}
	t.Logf("%+v", st)
	if st.Repack.Packs != 1 || st.Repack.Damaged != 1 || st.Repack.Names != 1 || st.DanglingNames != 2 {
		t.Fatalf("collect: %+v; want x's pack rewritten, w's left (damaged), y moved, 2 damaged names passed over", st)
	}
	checkFile(t, a, "y", y, 41)
	// v reads up to its damaged chunk, and there gets an error, not bytes.
	fv, err := a.Open(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(fv, 0, fv.Size()))
	if err == nil || !bytes.Equal(got, v[:len(got)]) || len(got) > 64<<10 {
		t.Fatalf("v over its damaged chunk: %d bytes, %v; want the first chunk and an error", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(root, "packs", wPack)); err != nil {
		t.Fatalf("the damaged pack: %v; want it kept", err)
	}
}

// TestManifestLiesAboutLength (red team 23): a manifest whose chunk
// lengths (taken from its size and chunk size) contradict its chunks'
// bytes — a chunk of 64 KiB listed as 4 KiB, or a 3-byte chunk listed in
// a file that needs more — reads as EIO on a host that holds the chunks
// in its cache as on one that does not, never as the cached bytes placed
// at the manifest's offsets, and never panics.
func TestManifestLiesAboutLength(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, t.TempDir()))
	real := randBytes(128<<10+3, 51) // chunks of 64 KiB: 2 full and one of 3 bytes
	if err := a.Publish(ctx, "real", bytes.NewReader(real), int64(len(real))); err != nil {
		t.Fatal(err)
	}
	checkFile(t, a, "real", real, 52) // every chunk now in a's cache
	name, _, err := a.Resolve(ctx, "real")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(s.dir, "s3", "kvfs", "pool")
	b, err := os.ReadFile(filepath.Join(root, "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	chunks := m["chunks"].([]any)
	for i, c := range []struct {
		lie  map[string]any
		offs []int64 // reads that meet a lying chunk
	}{
		// A 64 KiB chunk as the first 4096 bytes of a 4099-byte file.
		{map[string]any{"v": 1, "size": 4099, "chunk_size": 4096, "chunks": []any{chunks[0], chunks[2]}}, []int64{0, 4000}},
		// Two references to the 3-byte chunk in a file of 2 × 64 KiB.
		{map[string]any{"v": 1, "size": 128 << 10, "chunk_size": 64 << 10, "chunks": []any{chunks[2], chunks[2]}}, []int64{0, 4096, 100 << 10}},
		// The 3-byte chunk as a 2-byte file.
		{map[string]any{"v": 1, "size": 2, "chunk_size": 64 << 10, "chunks": []any{chunks[2]}}, []int64{0, 1}},
	} {
		lie := c.lie
		lb, _ := json.Marshal(lie)
		sum := sha256.Sum256(lb)
		ln := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(root, "manifests", ln), lb, 0o644); err != nil {
			t.Fatal(err)
		}
		path := "lie" + string(rune('0'+i))
		if err := a.PutRawName(ctx, path, ln); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*pool.Pool{a, s.host(t, s.config(t, ""))} { // cached, and not
			f, err := h.Open(ctx, path)
			if err != nil {
				continue // refused at open: as good
			}
			for _, off := range c.offs {
				buf := make([]byte, 5000)
				n, err := f.ReadAt(buf, off)
				if err == nil || err == io.EOF {
					t.Errorf("%s at %d: %d bytes, %v; want an error", path, off, n, err)
				}
			}
		}
	}
}

// packOf is the pack object holding chunk (by its bytes).
func packOf(t *testing.T, root string, chunk []byte) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "packs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(root, "packs", e.Name()))
		if err == nil && bytes.Contains(b, chunk) {
			return e.Name()
		}
	}
	t.Fatal("no pack holds the chunk")
	return ""
}

// TestNameConflicts (red team 23): a name cannot be a file and a
// directory at once, whoever publishes or renames: "d" is refused while
// "d/f" exists, "e/f" while "e" does, and a rename onto either; the names
// that exist stay readable.
func TestNameConflicts(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	b := randBytes(1000, 61)
	pub := func(path string) error { return a.Publish(ctx, path, bytes.NewReader(b), int64(len(b))) }
	for _, p := range []string{"d/f", "e", "x"} {
		if err := pub(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"d", "e/f", "e/g/h"} {
		if err := pub(p); !errors.Is(err, pool.ErrNameConflict) {
			t.Errorf("publish %s: %v, want ErrNameConflict", p, err)
		}
	}
	for _, to := range []string{"d", "e/f"} {
		if err := a.Rename(ctx, "x", to); !errors.Is(err, pool.ErrNameConflict) {
			t.Errorf("rename x to %s: %v, want ErrNameConflict", to, err)
		}
	}
	if err := a.Reserve(ctx, "d"); !errors.Is(err, pool.ErrNameConflict) && !errors.Is(err, fs.ErrExist) {
		t.Errorf("reserve d: %v, want a refusal", err)
	}
	names, err := a.List(ctx, "")
	if err != nil || strings.Join(names, " ") != "d/f e x" {
		t.Fatalf("names: %v, %v; want d/f e x", names, err)
	}
	for _, p := range names {
		checkFile(t, a, p, b, 62)
	}
	// A name's own replacement is no conflict.
	if err := pub("d/f"); err != nil {
		t.Fatal(err)
	}
}
