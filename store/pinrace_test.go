package store_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/internal/testutil"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// TestPinRace races Open, ReadAt and Close of a path against Rename over it
// and Remove of it, with no FUSE in between: the pin an open takes and the
// release a rename or remove does must serialize (docs/DESIGN.md, "Pins and
// releases serialize"). Every file carries a header from which each of its
// bytes follows, so a reader checks any read without knowing which version
// it opened. "F" always exists (renames replace it atomically), so an open
// of it must never fail; "G" is removed and put again, so its open may
// fail with ErrNotExist, but what it reads must be right. Any zeroed or
// wrong byte, short read, or error is a failure. Run it under -race;
// KVFS_STRESS sets its length.
func TestPinRace(t *testing.T) {
	for _, verify := range []bool{false, true} {
		t.Run(fmt.Sprintf("verify=%v", verify), func(t *testing.T) {
			testPinRace(t, verify)
		})
	}
}

func testPinRace(t *testing.T, verify bool) {
	const chunk = 4096
	s := storetest.New(t, storetest.Options{ChunkSize: chunk, Store: store.Options{Verify: verify}})
	deadline := time.Now().Add(testutil.StressDuration(t, 30*time.Second))
	put(t, s, "d/F", pinFile(1, 100_000))
	var (
		wg  sync.WaitGroup
		bad pinReport
	)
	// Writers: replace F by rename, and remove and re-create G.
	wg.Add(2)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(2, 0))
		for i := 0; time.Now().Before(deadline); i++ {
			tmp := fmt.Sprintf("d/.tmp%d", i)
			b := pinFile(r.Uint64(), 4096+r.IntN(1<<20))
			if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), tmp, store.PutOptions{}); err != nil {
				bad.add("writer", err.Error())
				return
			}
			if err := s.Rename(tmp, "d/F"); err != nil {
				bad.add("writer", err.Error())
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(3, 0))
		for time.Now().Before(deadline) {
			b := pinFile(r.Uint64(), 4096+r.IntN(1<<20))
			if _, _, err := s.Put(ctx, bytes.NewReader(b), int64(len(b)), "d/G", store.PutOptions{}); err != nil {
				bad.add("writer", err.Error())
				return
			}
			if err := s.Remove("d/G"); err != nil {
				bad.add("writer", err.Error())
				return
			}
		}
	}()
	reads := make([]int, 4)
	for k := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(10+k), 0))
			buf, want := make([]byte, 1<<20+4096), make([]byte, 1<<20+4096)
			for time.Now().Before(deadline) {
				path, always := "d/F", true
				if k%2 == 1 && r.IntN(2) == 0 {
					path, always = "d/G", false
				}
				f, err := s.Open(path)
				if err != nil {
					if always || !errors.Is(err, fs.ErrNotExist) {
						bad.add("open", err.Error())
					}
					continue
				}
				pinCheckFile(f, path, buf, want, r, &bad)
				if err := f.Close(); err != nil {
					bad.add("close", err.Error())
				}
				reads[k]++
			}
		}()
	}
	wg.Wait()
	t.Logf("opens that read: %v", reads)
	if err := bad.err(); err != nil {
		t.Fatal(err)
	}
}

// A pin-race file is a 24-byte header (magic, length, seed) followed by
// bytes derived from the seed. Its first half (rounded to 16 KiB) past the
// first chunk derives from seed 0 instead, the same in every file, so that
// versions share chunks and a release must keep the shared ones.
const pinMagic = "PINRACE1"

func pinFile(seed uint64, n int) []byte {
	b := make([]byte, n)
	pinExpect(b, 0, seed, int64(n))
	copy(b, pinMagic)
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	binary.LittleEndian.PutUint64(b[16:], seed)
	return b
}

// pinExpect fills p with the bytes at off of the file of size n made from
// seed (the header aside).
func pinExpect(p []byte, off int64, seed uint64, n int64) {
	shared := (n / 2) &^ (16<<10 - 1)
	var word uint64
	for i := range p {
		o := off + int64(i)
		if i == 0 || o%8 == 0 {
			s := seed
			if o >= 4096 && o < shared {
				s = 0
			}
			word = splitmix(s*0x9e3779b97f4a7c15 + uint64(o/8) + 1)
		}
		p[i] = byte(word >> (8 * (o % 8)))
	}
}

func splitmix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// pinCheckFile reads f whole and at random offsets and checks every byte.
func pinCheckFile(f *store.File, path string, buf, want []byte, r *rand.Rand, bad *pinReport) {
	size := f.Size()
	if size < 24 || size > int64(len(buf)) {
		bad.add("size", fmt.Sprintf("%s: size %d", path, size))
		return
	}
	b := buf[:size]
	n, err := f.ReadAt(b, 0)
	if err != nil || int64(n) != size {
		bad.add("read", fmt.Sprintf("%s: read %d of %d bytes: %v", path, n, size, err))
		return
	}
	if string(b[:8]) != pinMagic || int64(binary.LittleEndian.Uint64(b[8:])) != size {
		bad.add("header", fmt.Sprintf("%s: header %x, size %d", path, b[:24], size))
		return
	}
	seed := binary.LittleEndian.Uint64(b[16:])
	pinVerify(b[24:], want, 24, seed, size, path, bad)
	for range 4 {
		off := r.Int64N(size)
		p := b[:min(int64(r.IntN(256<<10)+1), size-off)]
		n, err := f.ReadAt(p, off)
		if n != len(p) || (err != nil && err != io.EOF) {
			bad.add("read", fmt.Sprintf("%s: read %d of %d bytes at %d: %v", path, n, len(p), off, err))
			continue
		}
		pinVerify(p, want, off, seed, size, path, bad)
	}
}

// pinVerify checks p, read at off (the header aside) of a file of size n
// made from seed, using want as scratch space.
func pinVerify(p, want []byte, off int64, seed uint64, n int64, path string, bad *pinReport) {
	if off < 24 {
		p, off = p[min(24-off, int64(len(p))):], 24
	}
	want = want[:len(p)]
	pinExpect(want, off, seed, n)
	kind, i, zeros, ok := testutil.Mismatch(p, want)
	if ok {
		return
	}
	bad.add(kind, fmt.Sprintf("%s (size %d, seed %d): byte %d is %#x, not %#x; %d zero bytes from there", path, n, seed, off+int64(i), p[i], want[i], zeros))
}

// pinReport counts bad outcomes by kind and keeps the first examples.
type pinReport struct {
	mu       sync.Mutex
	counts   map[string]int
	examples []string
}

func (r *pinReport) add(kind, example string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[kind]++
	if len(r.examples) < 8 {
		r.examples = append(r.examples, kind+": "+example)
	}
}

func (r *pinReport) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.counts) == 0 {
		return nil
	}
	return fmt.Errorf("bad reads %v; first:\n%s", r.counts, strings.Join(r.examples, "\n"))
}
