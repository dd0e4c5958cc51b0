//go:build linux

package tests

// Chunk sums taken while a snapshot is written: attacks (red team 26's)
// on the hashing of a new snapshot's chunks while it is written
// (fs/pieces.go, store/pieceplan.go, store/batch.go sum). A piece's sum
// is taken by the commit for the chunk at the same offset and of the same
// length: any way to change a piece's bytes after it was hashed without
// dropping the sums, or a sum used for a chunk of another length, stores a
// chunk under an ID that is not its sha256. Every test checks the bytes
// through a fresh process (sha256sum), kvfs inspect --verify where the
// result is a snapshot, again after a remount, and the store checker with
// Verify (rehashes every chunk) at cleanup.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// chunkSumSnap generates a snapshot of model over tokens and returns its bytes
// and the end of its header.
func chunkSumSnap(t *testing.T, model snapgen.Model, tokens []uint32) ([]byte, int) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.mlxkv")
	if err := model.WriteFile(p, tokens); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var pfx mlx.Prefix
	if err := pfx.UnmarshalBinary(b[:mlx.PrefixLen]); err != nil {
		t.Fatal(err)
	}
	return b, mlx.PrefixLen + int(pfx.HeaderLen)
}

// chunkSumFiles are the files a test expects on the mount: path to content,
// and whether the content is a snapshot that inspect --verify accepts.
type chunkSumFiles struct {
	want map[string][]byte
	snap map[string]bool
}

func newChunkSumFiles() *chunkSumFiles {
	return &chunkSumFiles{want: map[string][]byte{}, snap: map[string]bool{}}
}

func (fs *chunkSumFiles) expect(p string, b []byte, snap bool) {
	fs.want[p] = bytes.Clone(b)
	fs.snap[p] = snap
}

// check reads every file through a fresh process and verifies snapshots.
func (fs *chunkSumFiles) check(t *testing.T, when string) {
	t.Helper()
	for p, want := range fs.want {
		sum := sha256.Sum256(want)
		out := sh(t, "sha256sum "+p+" && stat -c %s "+p)
		f := strings.Fields(out)
		if len(f) < 3 || f[0] != hex.EncodeToString(sum[:]) || f[2] != fmt.Sprint(len(want)) {
			got, _ := os.ReadFile(p)
			t.Fatalf("%s: %s: fresh process reads %q, want sha256 %x size %d (first difference at %d)",
				when, p, out, sum, len(want), firstDiffB(got, want))
		}
		if fs.snap[p] {
			if o := kvfs(t, "inspect", "--verify", p); !strings.Contains(o, "verify:       ok") {
				t.Fatalf("%s: %s does not verify:\n%s", when, p, o)
			}
		}
	}
}

// chunkSumHashed is the daemon's count of bytes its commits hashed.
func chunkSumHashed(t *testing.T, addr string) float64 {
	return counter(scrape(t, addr), "kvfs_commit_hashed_bytes_total")
}

// chunkSumOpen creates p for writing (O_TRUNC) with extra flags.
func chunkSumOpen(t *testing.T, p string, flags int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|flags, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func chunkSumPwrite(t *testing.T, f *os.File, b []byte, off int) {
	t.Helper()
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatalf("pwrite %d bytes at %d: %v", len(b), off, err)
	}
}

// chunkSumInOrder writes b[from:to] at its offsets in pieces of random sizes.
func chunkSumInOrder(t *testing.T, f *os.File, b []byte, from, to int, r *rand.Rand, max int) {
	t.Helper()
	for off := from; off < to; {
		n := min(to-off, 1+r.IntN(max))
		chunkSumPwrite(t, f, b[off:off+n], off)
		off += n
	}
}

func chunkSumGarbage(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 26))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// chunkSumPattern is a way of writing a snapshot: it writes into f (created
// empty) and returns the content the file must end with.
type chunkSumPattern struct {
	name string
	// write writes; data is the snapshot, h its header's end.
	write func(t *testing.T, f *os.File, data []byte, h int, r *rand.Rand) []byte
	// inOrder: the sums must be used (the commit hashes little).
	inOrder bool
}

func chunkSumPatterns() []chunkSumPattern {
	C := 64 << 10
	return []chunkSumPattern{
		{name: "in-order", inOrder: true, write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			chunkSumInOrder(t, f, d, 0, len(d), r, 200<<10)
			return d
		}},
		{name: "gap-then-backfill", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// The header and a little, then past a gap of many pieces (a
			// hole: zeros when hashed), then the gap's real bytes.
			a, b := h+1000, h+1000+5*C+777
			chunkSumInOrder(t, f, d, 0, a, r, 50<<10)
			chunkSumInOrder(t, f, d, b, len(d), r, 200<<10)
			chunkSumInOrder(t, f, d, a, b, r, 50<<10)
			return d
		}},
		{name: "garbage-then-rewrite", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// The header, then garbage in the rows, in order; then the real
			// rows over it.
			g := append(bytes.Clone(d[:h]), chunkSumGarbage(len(d)-h, r.Uint64())...)
			chunkSumInOrder(t, f, g, 0, len(g), r, 200<<10)
			chunkSumInOrder(t, f, d, h, len(d), r, 200<<10)
			return d
		}},
		{name: "overlap-by-one", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// Each write ends in a wrong byte that the next, starting at
			// inOrder-1, fixes.
			chunkSumPwrite(t, f, d[:h], 0)
			for off := h; off < len(d); {
				n := min(len(d)-off, 2+r.IntN(100<<10))
				b := bytes.Clone(d[off : off+n])
				if off+n < len(d) {
					b[n-1] ^= 0x5a
				}
				chunkSumPwrite(t, f, b, off)
				off += n
				if off < len(d) {
					off--
				}
			}
			return d
		}},
		{name: "truncate-shrink-write-at-old-end", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// Garbage in [s, L), written in order and hashed; cut to s; the
			// rest written from L on: [s, L) is a hole, zeros.
			s, L := h+3*C+5, h+9*C+11
			g := append(bytes.Clone(d[:s]), chunkSumGarbage(L-s, r.Uint64())...)
			chunkSumInOrder(t, f, g, 0, L, r, 100<<10)
			if err := f.Truncate(int64(s)); err != nil {
				t.Fatal(err)
			}
			chunkSumInOrder(t, f, d, L, len(d), r, 200<<10)
			w := bytes.Clone(d)
			clear(w[s:L])
			return w
		}},
		{name: "truncate-shrink-grow", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			s, L := h+2*C+3, h+7*C+1
			g := append(bytes.Clone(d[:s]), chunkSumGarbage(L-s, r.Uint64())...)
			chunkSumInOrder(t, f, g, 0, L, r, 100<<10)
			if err := f.Truncate(int64(s)); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(int64(L)); err != nil {
				t.Fatal(err)
			}
			chunkSumInOrder(t, f, d, L, len(d), r, 200<<10)
			w := bytes.Clone(d)
			clear(w[s:L])
			return w
		}},
		{name: "truncate-grow-then-fill", inOrder: true, write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// Grown to the full size first (zeros), then written in order
			// over the zeros.
			chunkSumInOrder(t, f, d, 0, h+100, r, 50<<10)
			if err := f.Truncate(int64(len(d))); err != nil {
				t.Fatal(err)
			}
			chunkSumInOrder(t, f, d, h+100, len(d), r, 200<<10)
			return d
		}},
		{name: "header-last", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			chunkSumInOrder(t, f, d, h, len(d), r, 200<<10)
			chunkSumPwrite(t, f, d[:h], 0)
			return d
		}},
		{name: "header-rewritten", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// The header of another layout (rows of another length: the
			// plan cuts elsewhere), the rows, then the real header.
			other := chunkSumOtherHeader(t, h)
			chunkSumPwrite(t, f, other, 0)
			chunkSumInOrder(t, f, d, h, len(d), r, 200<<10)
			chunkSumPwrite(t, f, d[:h], 0)
			return d
		}},
		{name: "write-after-fsync", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			m := len(d) / 3
			chunkSumInOrder(t, f, d, 0, m, r, 200<<10)
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			chunkSumInOrder(t, f, d, m, 2*m, r, 200<<10)
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			// back into what the first commit stored
			chunkSumPwrite(t, f, chunkSumGarbage(3*C, 9), h)
			chunkSumInOrder(t, f, d, 2*m, len(d), r, 200<<10)
			chunkSumPwrite(t, f, d[h:h+3*C], h)
			return d
		}},
		{name: "threads-interleaved", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// Four threads take the next block from a shared counter:
			// nearly in order, racing.
			var next atomic.Int64
			bs := 5000 + r.IntN(60000)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						off := int(next.Add(int64(bs))) - bs
						if off >= len(d) {
							return
						}
						if _, err := f.WriteAt(d[off:min(off+bs, len(d))], int64(off)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			return d
		}},
		{name: "two-fds-alternate", write: func(t *testing.T, f *os.File, d []byte, h int, r *rand.Rand) []byte {
			// Another open of the file writes the odd blocks, this one the
			// even ones: each in order from its own view.
			g, err := os.OpenFile(f.Name(), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			bs := 40000 + r.IntN(30000)
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			for k, w := range []*os.File{f, g} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for off := k * bs; off < len(d); off += 2 * bs {
						if _, err := w.WriteAt(d[off:min(off+bs, len(d))], int64(off)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			return d
		}},
	}
}

// chunkSumOtherHeader returns the prefix and header of a Tiny snapshot whose
// header is n bytes long exactly (a model ID padded to fit), so that a
// write of it is the start of a plan with other rows.
func chunkSumOtherHeader(t *testing.T, n int) []byte {
	t.Helper()
	for pad := 0; pad < 4096; pad++ {
		m := snapgen.Tiny
		m.ID = "test/tiny" + strings.Repeat("x", pad)
		b, h := chunkSumSnap(t, m, snapgen.Tokens(40, 77))
		if h == n {
			return b[:h]
		}
		if h > n {
			break
		}
	}
	// No fit: the same length of garbage (no plan).
	return chunkSumGarbage(n, 5)
}

// TestChunkSumWritePatterns writes a snapshot in each pattern through the
// mount (as NAME.tmp, fsync, rename, the engine's protocol; and under its
// final name): what reads back is what was written, it verifies, the
// commits of in-order patterns took the writer's sums, and the store
// checker (cleanup) rehashes every chunk.
func TestChunkSumWritePatterns(t *testing.T) {
	chunkSumWritePatterns(t)
}

// TestChunkSumWritebackCache is the same under -o writeback_cache, where the
// kernel batches writes.
func TestChunkSumWritebackCache(t *testing.T) {
	chunkSumWritePatterns(t, "-o", "writeback_cache")
}

func chunkSumWritePatterns(t *testing.T, args ...string) {
	addr := freeAddr(t)
	m := newMount(t, append([]string{"--metrics", addr}, args...)...)
	ns := m.path("fp/rt26")
	if err := os.MkdirAll(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	// Tiny, 2000 tokens: rows of 250 KiB (four chunks), 2 MiB: in a
	// spool file. Tiny, 600: 600 KiB, a spool in memory.
	big, hb := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(2000, 1))
	small, hs := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(600, 2))
	files := newChunkSumFiles()
	wb := len(args) > 0 || os.Getenv("KVFS_TEST_MOUNT_ARGS") != ""
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 26))
	for i, pt := range chunkSumPatterns() {
		for j, v := range []struct {
			d []byte
			h int
		}{{big, hb}, {small, hs}} {
			// the engine's protocol (NAME.tmp, rename) every other time
			for _, tmp := range []bool{(i+j)%2 == 1} {
				name := filepath.Join(ns, fmt.Sprintf("%s-%d-%v.mlxkv", pt.name, j, tmp))
				p := name
				if tmp {
					p += ".tmp"
				}
				h0 := chunkSumHashed(t, addr)
				f := chunkSumOpen(t, p, 0)
				want := pt.write(t, f, v.d, v.h, r)
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				if tmp {
					if err := os.Rename(p, name); err != nil {
						t.Fatal(err)
					}
				}
				hashed := chunkSumHashed(t, addr) - h0
				t.Logf("%s/%d tmp=%v: commits hashed %g of %d bytes", pt.name, j, tmp, hashed, len(want))
				if pt.inOrder && !wb && hashed > float64(len(want))/4 && i >= 0 {
					t.Errorf("%s: written in order, the commit hashed %g of %d bytes: sums not used, the attack is void", pt.name, hashed, len(want))
				}
				one := newChunkSumFiles()
				one.expect(name, want, bytes.Equal(want, v.d))
				one.check(t, pt.name)
				files.expect(name, want, bytes.Equal(want, v.d))
			}
		}
	}
	files.check(t, "all written")
	remount(t, m, append([]string{"--metrics", freeAddr(t)}, args...)...)
	files.check(t, "after a remount")
}

// TestChunkSumAppendAndMmap writes new snapshots with O_APPEND (random piece
// sizes) and through a shared writable mapping (in order, and in a random
// page order), then checks them.
func TestChunkSumAppendAndMmap(t *testing.T) {
	m := newMount(t)
	ns := m.path("fp/rt26m")
	os.MkdirAll(ns, 0o755)
	d, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(1500, 3))
	files := newChunkSumFiles()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))

	p := filepath.Join(ns, "append.mlxkv")
	f := chunkSumOpen(t, p, os.O_APPEND)
	for off := 0; off < len(d); {
		n := min(len(d)-off, 1+r.IntN(90<<10))
		if _, err := f.Write(d[off : off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	files.expect(p, d, true)

	for _, order := range []string{"in-order", "random", "rewrite"} {
		p := filepath.Join(ns, "mmap-"+order+".mlxkv")
		f := chunkSumOpen(t, p, 0)
		f.Close()
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(int64(len(d))); err != nil {
			t.Fatal(err)
		}
		mm, err := syscall.Mmap(int(f.Fd()), 0, len(d), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		pages := make([]int, (len(d)+4095)/4096)
		for i := range pages {
			pages[i] = i
		}
		if order == "random" {
			r.Shuffle(len(pages), func(i, j int) { pages[i], pages[j] = pages[j], pages[i] })
		}
		if order == "rewrite" {
			// Garbage first, flushed (in order), then the real bytes.
			copy(mm, chunkSumGarbage(len(d), 4))
			if err := msync(mm); err != nil {
				t.Fatal(err)
			}
		}
		for k, i := range pages {
			copy(mm[i*4096:min(len(d), i*4096+4096)], d[i*4096:min(len(d), i*4096+4096)])
			if k%64 == 63 {
				msync(mm)
			}
		}
		if err := msync(mm); err != nil {
			t.Fatal(err)
		}
		syscall.Munmap(mm)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		files.expect(p, d, true)
	}
	files.check(t, "written")
	remount(t, m)
	files.check(t, "after a remount")
}

func msync(b []byte) error {
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 4 /* MS_SYNC */)
	if e != 0 {
		return e
	}
	return nil
}

// TestChunkSumNames: a file written under a plain name and renamed to a
// snapshot's before its fsync, the reverse, and a snapshot's name in a
// blocks directory.
func TestChunkSumNames(t *testing.T) {
	m := newMount(t)
	ns := m.path("fp/rt26n")
	os.MkdirAll(filepath.Join(ns, "blocks"), 0o755)
	d, h := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(1200, 4))
	files := newChunkSumFiles()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	for _, c := range []struct{ from, to string }{
		{"plain", "plain.mlxkv"},
		{"snap.mlxkv", "snapnow"},
		{"snap2.mlxkv.tmp", "snap2.mlxkv"},
		{"blocks/b.mlxkv", "blocks/b2.mlxkv"},
		{"blocks/c.mlxkv", "c.mlxkv"},
		{"d.mlxkv", "blocks/d.mlxkv"},
	} {
		from, to := filepath.Join(ns, c.from), filepath.Join(ns, c.to)
		f := chunkSumOpen(t, from, 0)
		chunkSumInOrder(t, f, d, 0, len(d)/2, r, 100<<10)
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
		// out of order after the rename, then in order
		chunkSumPwrite(t, f, d[h:h+1000], h)
		chunkSumInOrder(t, f, d, len(d)/2, len(d), r, 100<<10)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		files.expect(to, d, !strings.Contains(c.to, "blocks/") && strings.HasSuffix(c.to, ".mlxkv"))
	}
	files.check(t, "written")
	remount(t, m)
	files.check(t, "after a remount")
}

// TestChunkSumParentGone: a snapshot extending another (its rows planned with
// the parent's cuts) whose parent is removed, or replaced by one of other
// tokens, or appears, while it is written: the commit cuts otherwise than
// the plan, at the same offsets with other lengths.
func TestChunkSumParentGone(t *testing.T) {
	m := newMount(t)
	ns := m.path("fp/rt26p")
	os.MkdirAll(ns, 0o755)
	base := snapgen.Tokens(1000, 5)
	a, _ := chunkSumSnap(t, snapgen.Tiny, base)
	other, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(1000, 55))
	files := newChunkSumFiles()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	for i, act := range []string{"remove", "replace", "appear", "keep"} {
		ext, h := chunkSumSnap(t, snapgen.Tiny, snapgen.Extend(base, 1000+300*i, uint64(50+i)))
		pa := filepath.Join(ns, fmt.Sprintf("a%d.mlxkv", i))
		if act != "appear" {
			if err := os.WriteFile(pa, a, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		pb := filepath.Join(ns, fmt.Sprintf("b%d.mlxkv", i))
		f := chunkSumOpen(t, pb, 0)
		mid := h + (len(ext)-h)/3
		chunkSumInOrder(t, f, ext, 0, mid, r, 100<<10)
		switch act {
		case "remove":
			if err := os.Remove(pa); err != nil {
				t.Fatal(err)
			}
		case "replace":
			if err := os.WriteFile(pa+".tmp", other, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(pa+".tmp", pa); err != nil {
				t.Fatal(err)
			}
			files.expect(pa, other, true)
		case "appear":
			if err := os.WriteFile(pa, a, 0o644); err != nil {
				t.Fatal(err)
			}
			files.expect(pa, a, true)
		case "keep":
			files.expect(pa, a, true)
		}
		chunkSumInOrder(t, f, ext, mid, len(ext), r, 100<<10)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		files.expect(pb, ext, true)
		files.check(t, act)
	}
	remount(t, m)
	files.check(t, "after a remount")
}

// TestChunkSumHostileHeaders: valid headers that claim far more data than is
// written, rows just under and at the 4 KiB bound, garbage rows and bytes
// after a valid snapshot: the daemon answers promptly and stores the
// bytes as written.
func TestChunkSumHostileHeaders(t *testing.T) {
	m := newMount(t)
	ns := m.path("fp/rt26h")
	os.MkdirAll(ns, 0o755)
	files := newChunkSumFiles()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	write := func(name string, b []byte, snap bool) {
		p := filepath.Join(ns, name)
		start := time.Now()
		f := chunkSumOpen(t, p, 0)
		chunkSumInOrder(t, f, b, 0, len(b), r, 70<<10)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s: %v to write %d bytes", name, d, len(b))
		}
		files.expect(p, b, snap)
	}
	huge, h := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(20000, 7))
	write("claims-20MiB.mlxkv", huge[:h+300<<10], false)
	write("header-only.mlxkv", huge[:h], false)
	write("header-short.mlxkv", huge[:h-1], false)
	tiny16, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(16, 8)) // 2 KiB rows
	write("rows-2k.mlxkv", tiny16, true)
	tiny32, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(32, 9)) // 4 KiB rows
	write("rows-4k.mlxkv", tiny32, true)
	tiny33, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(33, 9)) // 4 KiB + 128
	write("rows-4k1.mlxkv", tiny33, true)
	mid, hm := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(900, 10))
	g := append(bytes.Clone(mid[:hm]), chunkSumGarbage(len(mid)-hm, 11)...)
	write("garbage-rows.mlxkv", g, false)
	write("trailing.mlxkv", append(bytes.Clone(mid), chunkSumGarbage(200<<10, 12)...), false)
	write("truncated-rows.mlxkv", mid[:len(mid)-3000], false)
	files.check(t, "written")
	remount(t, m)
	files.check(t, "after a remount")
}

// TestChunkSumKillDaemon: snapshots written and fsynced, then the daemon
// killed while another is written, and while one is committed: after a
// remount every fsynced snapshot reads back and verifies, and the store
// checks clean.
func TestChunkSumKillDaemon(t *testing.T) {
	m := newMount(t)
	ns := m.path("fp/rt26k")
	os.MkdirAll(ns, 0o755)
	files := newChunkSumFiles()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for round := range 3 {
		if round > 0 {
			m.start(t)
		}
		for i := range 3 {
			d, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(800+100*i, uint64(round*10+i)))
			p := filepath.Join(ns, fmt.Sprintf("r%d-%d.mlxkv", round, i))
			f := chunkSumOpen(t, p+".tmp", 0)
			chunkSumInOrder(t, f, d, 0, len(d), r, 100<<10)
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.Rename(p+".tmp", p); err != nil {
				t.Fatal(err)
			}
			files.expect(p, d, true)
		}
		// One being written, and one big one in its commit, when killed.
		d, _ := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(6000, uint64(round+100)))
		var wg sync.WaitGroup
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.OpenFile(filepath.Join(ns, fmt.Sprintf("k%d-%d.mlxkv", round, k)), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
				if err != nil {
					return
				}
				defer f.Close()
				for off := 0; off < len(d); off += 64 << 10 {
					if _, err := f.WriteAt(d[off:min(len(d), off+64<<10)], int64(off)); err != nil {
						return
					}
					if k == 0 {
						time.Sleep(time.Millisecond)
					}
				}
				f.Sync()
			}()
		}
		time.Sleep(time.Duration(50+r.IntN(300)) * time.Millisecond)
		syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
		wg.Wait()
		unmountKilled(m)
		s := m.openStore(t)
		if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
			s.Close()
			t.Fatalf("round %d: %v", round, err)
		}
		for p, want := range files.want {
			got, err := readStored(s, strings.TrimPrefix(p, m.mnt+"/"))
			if err != nil || !bytes.Equal(got, want) {
				s.Close()
				t.Fatalf("round %d: fsynced %s lost or wrong after a kill: %v (first difference at %d)", round, p, err, firstDiffB(got, want))
			}
		}
		s.Close()
	}
	m.start(t)
	files.check(t, "after the kills")
}

// TestChunkSumOtherUser: a non-root user writes snapshots (cp, and in order
// and out of order through a client shell) in a directory of its own.
func TestChunkSumOtherUser(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	ns := m.path("fp/rt26u")
	os.MkdirAll(ns, 0o755)
	if err := os.Chown(ns, int(u.uid), int(u.gid)); err != nil {
		t.Fatal(err)
	}
	src, err := os.MkdirTemp("", "rt26u-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	os.Chmod(src, 0o755)
	d, h := chunkSumSnap(t, snapgen.Tiny, snapgen.Tokens(1300, 12))
	sp := filepath.Join(src, "s.mlxkv")
	if err := os.WriteFile(sp, d, 0o644); err != nil {
		t.Fatal(err)
	}
	files := newChunkSumFiles()
	u.shOK(t, fmt.Sprintf("cp %s %s/cp.mlxkv", sp, ns))
	files.expect(ns+"/cp.mlxkv", d, true)
	// dd in order in 64 KiB blocks, then a second dd back over the header
	u.shOK(t, fmt.Sprintf("dd if=%s of=%s/dd.mlxkv.tmp bs=65536 conv=fsync status=none && dd if=%s of=%s/dd.mlxkv.tmp bs=%d count=1 conv=notrunc,fsync status=none && mv %s/dd.mlxkv.tmp %s/dd.mlxkv",
		sp, ns, sp, ns, h, ns, ns))
	files.expect(ns+"/dd.mlxkv", d, true)
	// the second half first
	half := (len(d) / 2 / 4096) * 4096
	u.shOK(t, fmt.Sprintf("dd if=%s of=%s/ooo.mlxkv bs=4096 skip=%d seek=%d status=none && dd if=%s of=%s/ooo.mlxkv bs=4096 count=%d conv=notrunc,fsync status=none",
		sp, ns, half/4096, half/4096, sp, ns, half/4096))
	files.expect(ns+"/ooo.mlxkv", d, true)
	files.check(t, "written by "+u.name)
	remount(t, m, "-o", "allow_other")
	files.check(t, "after a remount")
}

// unmountKilled unmounts a killed daemon's mount point.
func unmountKilled(m *mount) {
	for range 50 {
		if err := syscall.Unmount(m.mnt, syscall.MNT_DETACH); err == nil || !isMounted(m.mnt) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}
