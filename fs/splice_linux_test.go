package fs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
	"golang.org/x/sys/unix"
)

const page = 4096

func TestPipeSlots(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{1, 1}, {page, 1}, {page + 1, 2}, {3 * page, 4}, {64 << 10, 16}, {64<<10 + 1, 32},
		{256000 + 16 + page, 64}, {1<<20 + 16 + page, 512},
	} {
		if got := pipeSlots(c.n, page); got != c.want {
			t.Errorf("pipeSlots(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestSpliceFits: the buffer count and the fit decision, for the layouts
// that matter, at their exact boundaries.
func TestSpliceFits(t *testing.T) {
	f := os.NewFile(0, "pack") // only compared with nil
	fd := func(off int64, n int) store.Segment { return store.Segment{Fd: f, Off: off, Len: n} }
	zero := func(n int) store.Segment { return store.Segment{Len: n} }
	// 256000 bytes: go-fuse's pipe is 262144 bytes, 64 buffers, one of
	// them the header's.
	const reply = 256_000
	// A single range whose pages take exactly 63 buffers at the end of
	// a 64-buffer pipe: 258,032 bytes are 62 pages and 4,080 bytes.
	const tight = 262144 - fuseHeaderBytes - page
	cases := []struct {
		name    string
		segs    []store.Segment
		maxPipe int
		bufs    int
		fits    bool
	}{
		{"issue 7: second range at pack offset 200000", []store.Segment{fd(0, 196_608), fd(200_000, 59_392)}, 2 << 20, 48 + 16, false},
		{"same, second range page-aligned", []store.Segment{fd(0, 196_608), fd(200_704, 59_392)}, 2 << 20, 48 + 15, true},
		{"one range, aligned", []store.Segment{fd(0, reply)}, 2 << 20, 63, true},
		{"one range, unaligned", []store.Segment{fd(4095, reply)}, 2 << 20, 64, false},
		{"one range, 63 buffers exactly", []store.Segment{fd(16, tight)}, 2 << 20, 63, true},
		{"one range, 64 buffers", []store.Segment{fd(17, tight)}, 2 << 20, 64, false},
		{"zeros, 62 pages", []store.Segment{zero(62 * page)}, 2 << 20, 63, true},
		{"zeros, 62 pages and a byte", []store.Segment{zero(62*page + 1)}, 2 << 20, 64, false},
		{"range, zeros, range", []store.Segment{fd(100, 5000), zero(3000), fd(9000, 60_000)}, 2 << 20, 2 + 2 + 15, true},
		{"one byte", []store.Segment{fd(4095, 1)}, 2 << 20, 1, true},
		// go-fuse's pipe is at least header+payload+a page, rounded up
		// to a power of two pages: here 2 pages, which cannot hold the
		// header and two pages' buffers.
		{"two bytes across a page boundary", []store.Segment{fd(4095, 2)}, 2 << 20, 2, false},
		{"1 MiB aligned", []store.Segment{fd(0, 1<<20)}, 2 << 20, 256, true},
		{"1 MiB, 1 MiB pipe limit", []store.Segment{fd(0, 1<<20)}, 1 << 20, 256, false},
		{"largest reply under a 1 MiB limit", []store.Segment{fd(0, 1<<20-fuseHeaderBytes-page)}, 1 << 20, 255, true},
		{"one byte more", []store.Segment{fd(0, 1<<20-fuseHeaderBytes-page+1)}, 1 << 20, 255, false},
		{"1 MiB of unaligned 4 KiB chunks", repeat(256, func(i int) store.Segment { return fd(int64(i)*8192+100, page) }), 2 << 20, 512, false},
		{"1 MiB of unaligned 8 KiB chunks", repeat(128, func(i int) store.Segment { return fd(int64(i)*16384+100, 2*page) }), 2 << 20, 384, true},
	}
	for _, c := range cases {
		total := 0
		for _, s := range c.segs {
			total += s.Len
		}
		bufs := pipeBuffers(c.segs, page)
		if bufs != c.bufs {
			t.Errorf("%s: %d buffers, want %d", c.name, bufs, c.bufs)
		}
		if got := spliceFits(bufs, total, page, c.maxPipe); got != c.fits {
			t.Errorf("%s: spliceFits = %v, want %v", c.name, got, c.fits)
		}
	}
}

func repeat(n int, seg func(int) store.Segment) []store.Segment {
	out := make([]store.Segment, n)
	for i := range out {
		out[i] = seg(i)
	}
	return out
}

// TestSpliceMatchesKernel checks the model against the kernel: random
// layouts of pack ranges (at any offset) and zero runs, sized around the
// pipe sizes' power-of-two boundaries, go through spliceResult and then
// through what go-fuse does with a reply (a pipe of the smallest size it
// may get, the header, the payload spliced behind it). A reply that
// spliceResult hands out must arrive whole and right; and for pack ranges
// alone the model must be exact: a layout it refuses really would come up
// short.
func TestSpliceMatchesKernel(t *testing.T) {
	if !canSplice {
		t.Fatal("pipes cannot grow here; go-fuse would not splice")
	}
	const fileBytes = 4 << 20
	path := filepath.Join(t.TempDir(), "pack")
	data := make([]byte, fileBytes)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spliced, refused := 0, 0
	for iter := 0; iter < 2000; iter++ {
		// Totals just under a power of two, where one buffer decides.
		total := (32<<10)<<r.IntN(4) - fuseHeaderBytes - page - r.IntN(3*page)
		withZeros := iter%2 == 1
		var segs []store.Segment
		var want []byte
		parts := 1 + r.IntN(6)
		for left := total; left > 0; parts-- {
			n := left
			if parts > 1 {
				n = 1 + r.IntN(left)
			}
			s := store.Segment{Len: n}
			if !withZeros || r.IntN(3) > 0 {
				s.Fd, s.Off = f, r.Int64N(fileBytes-int64(n))
				want = append(want, data[s.Off:s.Off+int64(n)]...)
			} else {
				want = append(want, make([]byte, n)...)
			}
			segs = append(segs, s)
			left -= n
		}
		fits := spliceFits(pipeBuffers(segs, page), total, page, 1<<30)
		res := spliceResult(&store.Segments{List: segs}, total)
		if fits != (res != nil) {
			t.Fatalf("layout %v: spliceFits %v but spliceResult %v", segs, fits, res != nil)
		}
		if res != nil {
			spliced++
			got := goFuseSplice(t, res, total)
			res.Done()
			if !bytes.Equal(got, want) {
				t.Fatalf("layout %v (%d bytes): go-fuse's pipe got %d bytes, want %d (equal prefix: %v)",
					segs, total, len(got), len(want), bytes.HasPrefix(want, got))
			}
			continue
		}
		refused++
		if withZeros {
			continue // the zero-run bound is allowed to be loose
		}
		// Pack ranges only: show that the reply would have come up short.
		if got := goFuseSplice(t, unboundedPipe(t, segs, total), total); len(got) == total {
			t.Fatalf("layout %v (%d bytes) was refused but fits go-fuse's pipe", segs, total)
		}
	}
	t.Logf("%d replies spliced whole, %d refused", spliced, refused)
	if spliced == 0 || refused == 0 {
		t.Fatal("the layouts did not reach both sides of the boundary")
	}
}

// goFuseSplice does with res what go-fuse's trySplice does, in a pipe of
// the smallest size go-fuse may have (header, payload and a page, rounded
// up to a power of two), and returns the payload that went in.
func goFuseSplice(t *testing.T, res fuse.ReadResult, total int) []byte {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, fuseHeaderBytes+total+page); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Write(p[1], make([]byte, fuseHeaderBytes)); err != nil || n != fuseHeaderBytes {
		t.Fatalf("header: %d %v", n, err)
	}
	var n int64
	var err error
	switch r := res.(type) {
	case interface {
		Seekable() (uintptr, int64, int)
	}:
		fd, off, sz := r.Seekable()
		n, err = unix.Splice(int(fd), &off, p[1], nil, sz, 0)
	case interface{ Stateful() (uintptr, int) }:
		fd, sz := r.Stateful()
		n, err = unix.Splice(int(fd), nil, p[1], nil, sz, 0)
	default:
		t.Fatalf("%T is neither seekable nor stateful: go-fuse would not splice it", res)
	}
	if err == unix.EAGAIN {
		n, err = 0, nil
	}
	if err != nil {
		t.Fatalf("splice: %v", err)
	}
	out := make([]byte, fuseHeaderBytes+int(n))
	if k, err := unix.Read(p[0], out); n > 0 && (err != nil || k != len(out)) {
		t.Fatalf("drain: %d %v", k, err)
	}
	return out[fuseHeaderBytes:]
}

// unboundedPipe fills a pipe large enough for any layout with segs, as
// spliceResult would without the fit check.
func unboundedPipe(t *testing.T, segs []store.Segment, total int) fuse.ReadResult {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, 2*page*pipeBuffers(segs, page)); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		off := s.Off
		if n, err := unix.Splice(int(s.Fd.Fd()), &off, p[1], nil, s.Len, 0); err != nil || int(n) != s.Len {
			sz, _ := unix.FcntlInt(uintptr(p[0]), unix.F_GETPIPE_SZ, 0)
			t.Fatalf("fill %d bytes at %d into a %d-byte pipe: %d %v", s.Len, s.Off, sz, n, err)
		}
	}
	return statefulPipe{fd: uintptr(p[0]), n: total}
}

type statefulPipe struct {
	fuse.ReadResult
	fd uintptr
	n  int
}

func (s statefulPipe) Stateful() (uintptr, int) { return s.fd, s.n }
