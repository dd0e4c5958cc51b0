package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
	"github.com/kvfs/kvfs/store"
)

var ctx = context.Background()

// randBytes are n bytes from seed.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkFile reads a pool file through ReadAt at unaligned offsets and sizes
// and checks it against want.
func checkFile(t testing.TB, p *pool.Pool, path string, want []byte, seed uint64) {
	t.Helper()
	f, err := p.Open(ctx, path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	if f.Size() != int64(len(want)) {
		t.Fatalf("%s: size %d, want %d", path, f.Size(), len(want))
	}
	got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: bytes differ", path)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for range 20 {
		if len(want) == 0 {
			break
		}
		off := r.IntN(len(want))
		n := 1 + r.IntN(min(len(want)-off, 300_000))
		b := make([]byte, n)
		if k, err := f.ReadAt(b, int64(off)); err != nil && !(errors.Is(err, io.EOF) && k == n) {
			t.Fatalf("read %s at %d+%d: %v", path, off, n, err)
		}
		if !bytes.Equal(b, want[off:off+n]) {
			t.Fatalf("%s at %d+%d: bytes differ", path, off, n)
		}
	}
	// Past the end: io.EOF, with what there is.
	b := make([]byte, 10)
	if k, err := f.ReadAt(b, int64(max(0, len(want)-3))); !errors.Is(err, io.EOF) || k != min(3, len(want)) {
		t.Fatalf("read %s across its end: %d, %v", path, k, err)
	}
}

// readBack reads a pool file whole and checks it against want.
func readBack(t testing.TB, p *pool.Pool, path string, want []byte) {
	t.Helper()
	f, err := p.Open(ctx, path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %s: %v (%d bytes, want %d; equal: %v)", path, err, len(got), len(want), bytes.Equal(got, want))
	}
}

// packBytes is the bytes of every pack object in the pool's bucket
// directory (versitygw's POSIX backend keeps objects as files).
func packBytes(t testing.TB, s *services) (int64, int) {
	t.Helper()
	var total int64
	n := 0
	root := filepath.Join(s.dir, "s3", "kvfs", "pool", "packs")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		total += fi.Size()
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total, n
}

// TestTwoHostsShare: a file published through host A is listed, opened
// and read byte-identical through host B (own cache, own knowledge), at
// unaligned offsets across many chunks and packs; a prefix-growth series
// published alternately through A and B stores each chunk once.
func TestTwoHostsShare(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, t.TempDir()))
	b := s.host(t, s.config(t, t.TempDir()))

	data := randBytes(3_300_001, 1) // about 100 chunks cut by content, 4 packs
	if err := a.Publish(ctx, "models/llama/one.mlxkv", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	chunks := a.Stats().KnownChunks
	names, err := b.List(ctx, "models/")
	if err != nil || len(names) != 1 || names[0] != "models/llama/one.mlxkv" {
		t.Fatalf("B lists %q, %v", names, err)
	}
	checkFile(t, b, "models/llama/one.mlxkv", data, 2)
	// A second read through B comes from its cache.
	checkFile(t, b, "models/llama/one.mlxkv", data, 3)
	if st := b.Stats(); st.Cache.Hits == 0 || st.Cache.Chunks != chunks {
		t.Fatalf("B's cache after two reads: %+v, want the file's %d chunks", st.Cache, chunks)
	}
	// Four readers of one open file at once, at unaligned offsets, through
	// a host with a cold cache.
	c := s.host(t, s.config(t, t.TempDir()))
	f, err := c.Open(ctx, "models/llama/one.mlxkv")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for range 50 {
				off := r.IntN(len(data))
				n := 1 + r.IntN(min(len(data)-off, 200_000))
				got := make([]byte, n)
				if _, err := f.ReadAt(got, int64(off)); err != nil && !errors.Is(err, io.EOF) {
					t.Errorf("concurrent read at %d+%d: %v", off, n, err)
					return
				}
				if !bytes.Equal(got, data[off:off+n]) {
					t.Errorf("concurrent read at %d+%d: bytes differ", off, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := b.Remove(ctx, "models/llama/one.mlxkv"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Open(ctx, "models/llama/one.mlxkv"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of a removed name through A: %v, want ENOENT", err)
	}
	before, _ := packBytes(t, s)

	// The series: file k is the first 64 KiB × (8 + 5k) + 1000 bytes of
	// one stream of bytes of no format (a partial last chunk each time).
	base := randBytes(64<<10*60, 7)
	distinct := map[[32]byte]int64{}
	for k := range 8 {
		n := 64<<10*(8+5*k) + 1000
		host := a
		if k%2 == 1 {
			host = b
		}
		if err := host.Publish(ctx, fmt.Sprintf("series/%d", k), bytes.NewReader(base[:n]), int64(n)); err != nil {
			t.Fatal(err)
		}
		// Bytes of no format are cut by content, as a store cuts them.
		_, err := store.Cut(ctx, bytes.NewReader(base[:n]), int64(n), store.CutOptions{ChunkSize: 64 << 10},
			func(cs []store.Chunk, _ int64, _ []byte) error {
				for _, c := range cs {
					distinct[c.Sum] = c.Len
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	var want int64
	for _, n := range distinct {
		want += n
	}
	after, packs := packBytes(t, s)
	if after-before != want {
		t.Fatalf("the series stored %d bytes in packs, want %d (each distinct chunk once)", after-before, want)
	}
	t.Logf("series: %d distinct chunks, %d bytes, %d pack objects in all", len(distinct), want, packs)
	for k := range 8 {
		n := 64<<10*(8+5*k) + 1000
		checkFile(t, a, fmt.Sprintf("series/%d", k), base[:n], uint64(k))
		checkFile(t, b, fmt.Sprintf("series/%d", k), base[:n], uint64(k))
	}
	// An empty file, and names that are not paths.
	if err := a.Publish(ctx, "empty", bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	checkFile(t, b, "empty", nil, 1)
	// A source shorter than the size given (a file that shrank while it
	// was published) fails the publish and sets no name: its chunk would
	// otherwise carry stale bytes of the chunk before.
	if err := a.Publish(ctx, "short", bytes.NewReader(data[:200_000]), 300_000); err == nil || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("publish of a short source: %v", err)
	}
	if _, err := b.Open(ctx, "short"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed publish left a name: %v", err)
	}
	if _, _, err := pool.ParsePool("s3://b/a#b"); err == nil {
		t.Fatal("a pool prefix with '#' was accepted")
	}
	for _, bad := range []string{"", "/abs", "a//b", "a/../b", "dir/", "nul\x00"} {
		if err := a.Publish(ctx, bad, bytes.NewReader(nil), 0); err == nil {
			t.Fatalf("publish %q succeeded", bad)
		}
	}
}

// TestMissingAndCorruptObjects: a pack that is gone makes the open fail
// with ENOENT; a pack whose bytes changed, or one gone after the open,
// fails the read with EIO; never wrong bytes.
func TestMissingAndCorruptObjects(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	b := s.host(t, s.config(t, ""))
	data := randBytes(1_500_000, 3)
	if err := a.Publish(ctx, "f", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	packsDir := filepath.Join(s.dir, "s3", "kvfs", "pool", "packs")
	ents, err := os.ReadDir(packsDir)
	if err != nil || len(ents) < 2 {
		t.Fatalf("packs: %v, %v", ents, err)
	}
	// Flip one byte in the first pack (objects are files under versitygw).
	victim := filepath.Join(packsDir, ents[0].Name())
	orig, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(orig)
	bad[len(bad)/2] ^= 1
	if err := os.WriteFile(victim, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := b.Open(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a damaged pack: %v, want EIO", err)
	}
	// Gone after the open: EIO mid-read.
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size())); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a removed pack: %v, want EIO", err)
	}
	// Gone before the open: ENOENT.
	if _, err := b.Open(ctx, "f"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open with a missing pack: %v, want ENOENT", err)
	}
	// A later publish of the same bytes through A, which believes the
	// pack is there, verifies it and uploads it again.
	if err := a.Publish(ctx, "f", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	checkFile(t, b, "f", data, 4)
}

// TestCollect: objects only removed names reach go; what a name reaches
// stays; the grace period keeps young objects; a dry run deletes nothing.
func TestCollect(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	shared := randBytes(640<<10, 5)
	x := append(bytes.Clone(shared), randBytes(900_000, 6)...)
	y := append(bytes.Clone(shared), randBytes(700_000, 7)...)
	for name, b := range map[string][]byte{"x": x, "y": y} {
		if err := a.Publish(ctx, name, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	// Objects under the prefix that are not this pool's (another pool
	// nested in it, a stray file): never collected.
	foreign := []string{
		filepath.Join(s.dir, "s3", "kvfs", "pool", "packs", "packs", strings.Repeat("ab", 32)),
		filepath.Join(s.dir, "s3", "kvfs", "pool", "manifests", "notahash"),
	}
	for _, f := range foreign {
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, []byte("not mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, f := range foreign {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("a foreign object was collected: %v", err)
			}
		}
	})
	if err := a.Remove(ctx, "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("second remove: %v, want ENOENT", err)
	}
	before, _ := packBytes(t, s)
	st, err := a.Collect(ctx, pool.CollectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 0 || st.YoungKept == 0 {
		t.Fatalf("collect within the grace period: %+v", st)
	}
	st, err = a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, DryRun: true})
	if err != nil || st.Deleted == 0 {
		t.Fatalf("dry run: %+v, %v", st, err)
	}
	if now, _ := packBytes(t, s); now != before {
		t.Fatal("a dry run deleted objects")
	}
	st, err = a.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := packBytes(t, s)
	t.Logf("collect: %+v; pack bytes %d → %d", st, before, after)
	if after >= before || st.Deleted == 0 {
		t.Fatalf("collect freed nothing: %+v", st)
	}
	checkFile(t, a, "y", y, 8)
	b := s.host(t, s.config(t, ""))
	checkFile(t, b, "y", y, 9)
	// x's own chunks are gone: only y's remain (a pack holding chunks of
	// both stays whole).
	if after < int64(len(y)) {
		t.Fatalf("pack bytes %d < y's %d", after, len(y))
	}
}

func TestManifestRejects(t *testing.T) {
	for _, c := range []struct{ name, doc string }{
		{"not json", `{`},
		{"version", `{"v":2,"size":0,"chunk_size":65536,"chunks":[]}`},
		{"chunk size", `{"v":1,"size":0,"chunk_size":1,"chunks":[]}`},
		{"negative size", `{"v":1,"size":-1,"chunk_size":65536,"chunks":[]}`},
		{"too few chunks", `{"v":1,"size":70000,"chunk_size":65536,"chunks":[{"sum":"` + strings.Repeat("a", 64) + `","pack":"` + strings.Repeat("b", 64) + `","off":0}]}`},
		{"bad sum", `{"v":1,"size":1,"chunk_size":65536,"chunks":[{"sum":"zz","pack":"` + strings.Repeat("b", 64) + `","off":0}]}`},
		{"bad pack", `{"v":1,"size":1,"chunk_size":65536,"chunks":[{"sum":"` + strings.Repeat("a", 64) + `","pack":"../x","off":0}]}`},
		{"negative offset", `{"v":1,"size":1,"chunk_size":65536,"chunks":[{"sum":"` + strings.Repeat("a", 64) + `","pack":"` + strings.Repeat("b", 64) + `","off":-5}]}`},
		{"offset overflow", `{"v":1,"size":1,"chunk_size":65536,"chunks":[{"sum":"` + strings.Repeat("a", 64) + `","pack":"` + strings.Repeat("b", 64) + `","off":9223372036854775807}]}`},
		{"v1 with a length", `{"v":1,"size":1,"chunk_size":65536,"chunks":[` + chunkDoc(0, 1) + `]}`},
		{"v1 with a lineage", `{"v":1,"size":0,"chunk_size":65536,"chunks":[]` + lineageDoc("mlxkv", "k", 0, 1) + `}`},
		{"v2 without lengths", `{"v":2,"size":1,"chunks":[` + chunkDoc(0, 0) + `]}`},
		{"v2 zero length", `{"v":2,"size":1,"chunks":[` + chunkDoc(0, 0) + `,` + chunkDoc(0, 1) + `]}`},
		{"v2 negative length", `{"v":2,"size":1,"chunks":[` + chunkDoc(0, -1) + `,` + chunkDoc(0, 2) + `]}`},
		{"v2 short", `{"v":2,"size":10,"chunks":[` + chunkDoc(0, 4) + `,` + chunkDoc(4, 5) + `]}`},
		{"v2 past the end", `{"v":2,"size":10,"chunks":[` + chunkDoc(0, 4) + `,` + chunkDoc(4, 7) + `]}`},
		{"v2 chunk too long", `{"v":2,"size":134217728,"chunks":[` + chunkDoc(0, 134217728) + `]}`},
		{"v2 length overflow", `{"v":2,"size":2,"chunks":[` + chunkDoc(0, 9223372036854775807) + `,` + chunkDoc(0, 9223372036854775807) + `]}`},
		{"v2 offset overflow", `{"v":2,"size":2,"chunks":[` + chunkDoc(9223372036854775807, 2) + `]}`},
		{"v2 with a chunk size", `{"v":2,"size":0,"chunk_size":65536,"chunks":[]}`},
		{"lineage without layout", `{"v":2,"size":0,"chunks":[]` + lineageDoc("mlxkv", "", 0, 1) + `}`},
		{"lineage few keys", `{"v":2,"size":0,"chunks":[]` + lineageDoc("mlxkv", "k", 600, 2) + `}`},
		{"lineage many keys", `{"v":2,"size":0,"chunks":[]` + lineageDoc("mlxkv", "k", 10, 2) + `}`},
		{"lineage negative tokens", `{"v":2,"size":0,"chunks":[]` + lineageDoc("mlxkv", "k", -1, 1) + `}`},
		{"lineage long layout", `{"v":2,"size":0,"chunks":[]` + lineageDoc("mlxkv", strings.Repeat("k", 5000), 0, 1) + `}`},
		{"lineage long kind", `{"v":2,"size":0,"chunks":[]` + lineageDoc(strings.Repeat("k", 33), "k", 0, 1) + `}`},
		{"lineage bad key", `{"v":2,"size":0,"chunks":[],"lineage":{"kind":"mlxkv","layout":"k","tokens":0,"keys":["zz"]}}`},
	} {
		if _, err := pool.DecodeManifest([]byte(c.doc)); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	// A manifest of a newer kvfs is refused saying so.
	_, err := pool.DecodeManifest([]byte(`{"v":3,"size":0,"chunks":[]}`))
	if err == nil || !strings.Contains(err.Error(), "manifest version 3: this kvfs reads versions 1 and 2") {
		t.Fatalf("version 3: %v", err)
	}
	// Both versions that are valid decode.
	for _, doc := range []string{
		`{"v":1,"size":70000,"chunk_size":65536,"chunks":[` + chunkDoc(0, 0) + `,` + chunkDoc(65536, 0) + `]}`,
		`{"v":2,"size":10,"chunks":[` + chunkDoc(0, 4) + `,` + chunkDoc(4, 6) + `]` + lineageDoc("llama", "k", 700, 3) + `}`,
	} {
		m, err := pool.DecodeManifest([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if _, enc, err := m.Encode(); err != nil || string(enc) != doc {
			t.Fatalf("%s encodes to %s, %v", doc, enc, err)
		}
	}
}

// chunkDoc is a manifest's chunk entry (a length of 0 is left out, as
// version 1 writes them).
func chunkDoc(off, n int64) string {
	doc := `{"sum":"` + strings.Repeat("a", 64) + `","pack":"` + strings.Repeat("b", 64) + `","off":` + fmt.Sprint(off)
	if n != 0 {
		doc += `,"len":` + fmt.Sprint(n)
	}
	return doc + `}`
}

// lineageDoc is a manifest's lineage record with nKeys chain keys.
func lineageDoc(kind, layout string, tokens int64, nKeys int) string {
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = `"` + strings.Repeat("c", 64) + `"`
	}
	return fmt.Sprintf(`,"lineage":{"kind":%q,"layout":%q,"tokens":%d,"keys":[%s]}`, kind, layout, tokens, strings.Join(keys, ","))
}

// FuzzDecodeManifest: no input panics, and what is accepted encodes back
// to a manifest that decodes the same.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"v":1,"size":0,"chunk_size":65536,"chunks":[]}`))
	f.Add([]byte(`{"v":1,"size":70000,"chunk_size":65536,"chunks":[{"sum":"` + strings.Repeat("a", 64) + `","pack":"` + strings.Repeat("b", 64) + `","off":0},{"sum":"` + strings.Repeat("c", 64) + `","pack":"` + strings.Repeat("d", 64) + `","off":65536}]}`))
	snap := `,"snap":{"model":"m","fingerprint":"f","ns":"","tokens":300,"min_reusable":0,"trimmable":true,"keys":["` + strings.Repeat("e", 64) + `","` + strings.Repeat("f", 64) + `"]}}`
	f.Add([]byte(`{"v":1,"size":0,"chunk_size":65536,"chunks":[]` + snap))
	f.Add([]byte(`{"v":1,"size":0,"chunk_size":65536,"chunks":[],"snap":{"tokens":300,"min_reusable":301,"keys":[]}}`))
	f.Add([]byte(`{"v":2,"size":10,"chunks":[` + chunkDoc(0, 4) + `,` + chunkDoc(4, 6) + `]` + lineageDoc("llama", "k", 700, 3) + `}`))
	f.Add([]byte(`{"v":2,"size":5,"chunks":[` + chunkDoc(0, 5) + `]` + snap))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := pool.DecodeManifest(b)
		if err != nil {
			return
		}
		_, enc, err := m.Encode()
		if err != nil {
			t.Fatalf("accepted manifest does not encode: %v", err)
		}
		m2, err := pool.DecodeManifest(enc)
		if err != nil || m2.Size != m.Size || len(m2.Chunks) != len(m.Chunks) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range m.Chunks {
			if m.Chunks[i] != m2.Chunks[i] {
				t.Fatalf("chunk %d: %+v != %+v", i, m.Chunks[i], m2.Chunks[i])
			}
		}
		if (m.Lineage == nil) != (m2.Lineage == nil) || m.Lineage != nil && (m.Lineage.Layout != m2.Lineage.Layout ||
			m.Lineage.Tokens != m2.Lineage.Tokens || !slices.Equal(m.Lineage.Keys, m2.Lineage.Keys)) {
			t.Fatalf("lineage round trip: %+v != %+v", m.Lineage, m2.Lineage)
		}
		if (m.Snap == nil) != (m2.Snap == nil) || m.Snap != nil && (m.Snap.Tokens != m2.Snap.Tokens || len(m.Snap.Keys) != len(m2.Snap.Keys) ||
			m.Snap.Model != m2.Snap.Model || m.Snap.MinReusable != m2.Snap.MinReusable) {
			t.Fatalf("snapshot record round trip: %+v != %+v", m.Snap, m2.Snap)
		}
	})
}
