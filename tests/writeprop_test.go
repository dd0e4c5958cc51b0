//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvfs/kvfs/internal/testutil"
)

// TestWriteInterleavingsDedup is issue 28's property test: random
// interleavings of writes that repeat chunks the store holds (whole
// 64 KiB chunks of a committed file, at their own offsets and at others),
// new bytes, and parts of stored chunks, at unaligned offsets, past the
// end (holes) and over what was written, through handles open only for
// writing (direct writes) and for reading and writing (the page cache),
// with fsyncs between, while readers on other descriptors read the file.
// After every write returns, a reader's read of the range just written
// shows its bytes (a reader never sees the file's older bytes there, as
// on ext4); every reader's read equals the model at some moment, checked
// where no write overlaps; at the end the file reads back as the model,
// through read(2) and mmap, and again after a remount; the store's check
// is clean.
func TestWriteInterleavingsDedup(t *testing.T) {
	requireRoot(t)
	m := newMount(t)
	const C = 64 << 10
	r := rand.New(rand.NewPCG(28, 1))
	base := make([]byte, 64*C)
	for i := range base {
		base[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(m.path("base"), base, 0o644); err != nil {
		t.Fatal(err)
	}
	files := 6
	ops := 120
	if testutil.StressFull() {
		files, ops = 24, 400
	}
	models := map[string][]byte{}
	for k := range files {
		name := fmt.Sprintf("f%d", k)
		if k%3 == 2 {
			name += ".mlxkv" // a snapshot's name: chunked as one if it parses, else as any file
		}
		models[name] = writeInterleaving(t, m, name, base, r, ops, k%2 == 0)
	}
	if out, err := exec.Command(kvfsBin, "unmount", m.mnt).CombinedOutput(); err != nil {
		t.Fatalf("unmount: %v\n%s", err, out)
	}
	m.check(t)
	m.start(t)
	for name, model := range models {
		if got, err := os.ReadFile(m.path(name)); err != nil || !bytes.Equal(got, model) {
			t.Errorf("%s after the remount: %d bytes (of %d), equal %v, %v", name, len(got), len(model), bytes.Equal(got, model), err)
		}
	}
}

// writeInterleaving writes one file by ops random writes and checks it
// as TestWriteInterleavingsDedup says; direct: its writer opens it
// O_WRONLY (direct writes), else O_RDWR.
func writeInterleaving(t *testing.T, m *mount, name string, base []byte, r *rand.Rand, ops int, direct bool) []byte {
	t.Helper()
	const C = 64 << 10
	p := m.path(name)
	flags := os.O_RDWR
	if direct {
		flags = os.O_WRONLY
	}
	w, err := os.OpenFile(p, flags|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var model []byte
	var mu sync.Mutex // model, writes and done
	// writes are the ranges written, in order, each logged before its
	// write(2) begins; done counts those that returned. A reader checks
	// its read against the model only if no write that had not returned
	// when it began overlaps it.
	var writes [][2]int
	done := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	// Readers: each read, where no write is in flight, equals the model.
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(k), 9))
			f, err := os.Open(p)
			if err != nil {
				bad.Store(err.Error())
				return
			}
			defer f.Close()
			buf := make([]byte, 3*C)
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				size, from := len(model), done
				mu.Unlock()
				if size == 0 {
					continue
				}
				off := rr.IntN(size)
				n := 1 + rr.IntN(min(len(buf), size-off))
				got, err := f.ReadAt(buf[:n], int64(off))
				mu.Lock()
				overlaps := false
				for _, w := range writes[from:] {
					overlaps = overlaps || w[0] < off+got && off < w[1]
				}
				if err == nil && !overlaps && !bytes.Equal(buf[:got], model[off:off+got]) {
					bad.Store(fmt.Sprintf("%s: a reader's read of [%d,+%d) differs from the bytes written", name, off, got))
				}
				mu.Unlock()
			}
		}()
	}
	check, err := os.Open(p) // reads each write back as soon as it returns
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	for i := range ops {
		var data []byte
		switch r.IntN(4) {
		case 0: // a whole stored chunk
			c := r.IntN(len(base) / C)
			data = base[c*C : (c+1)*C]
		case 1: // several stored chunks in a row
			c := r.IntN(len(base)/C - 4)
			data = base[c*C : (c+1+r.IntN(4))*C]
		case 2: // part of a stored chunk
			a := r.IntN(len(base) - 1)
			data = base[a : a+1+r.IntN(min(len(base)-a-1, C+C/2))]
		default: // new bytes
			data = make([]byte, 1+r.IntN(3*C))
			for j := range data {
				data[j] = byte(r.Uint32())
			}
		}
		var off int
		switch r.IntN(4) {
		case 0: // at the end (in order)
			off = len(model)
		case 1: // on the chunk grid
			off = C * r.IntN(len(model)/C+2)
		default: // anywhere, past the end too
			off = r.IntN(len(model) + C)
		}
		mu.Lock()
		writes = append(writes, [2]int{off, off + len(data)})
		mu.Unlock()
		if _, err := w.WriteAt(data, int64(off)); err != nil {
			t.Fatalf("%s: write %d of %d bytes at %d: %v", name, i, len(data), off, err)
		}
		mu.Lock()
		if end := off + len(data); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], data)
		done++
		mu.Unlock()
		got := make([]byte, len(data))
		if _, err := check.ReadAt(got, int64(off)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: write %d of %d bytes at %d returned; a read of them then: %v, equal %v", name, i, len(data), off, err, bytes.Equal(got, data))
		}
		if r.IntN(10) == 0 {
			if err := w.Sync(); err != nil {
				t.Fatalf("%s: fsync: %v", name, err)
			}
		}
		if v := bad.Load(); v != nil {
			t.Fatal(v)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("%s: close: %v", name, err)
	}
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, model) {
		t.Fatalf("%s: reads back %d bytes (of %d), equal %v, %v", name, len(got), len(model), bytes.Equal(got, model), err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mm, err := syscall.Mmap(int(f.Fd()), 0, len(model), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("%s: mmap: %v", name, err)
	}
	defer syscall.Munmap(mm)
	if !bytes.Equal(mm, model) {
		t.Fatalf("%s: its mapping differs from the bytes written", name)
	}
	return model
}

// TestWriteOnlyOpensAreDirect: an open only for writing (a create and an
// open of an existing file) is answered FOPEN_DIRECT_IO, so that its
// writes go around the kernel's page cache (issue 28); an open that also
// reads keeps the page cache (it may be mapped), and so does every open
// with --no-killpriv. Read from the daemon's --debug-fuse log: each
// CREATE and OPEN reply, in order.
func TestWriteOnlyOpensAreDirect(t *testing.T) {
	for _, c := range []struct {
		args   []string
		direct bool
	}{{nil, true}, {[]string{"--no-killpriv"}, false}} {
		m := newMount(t, append([]string{"--debug-fuse", "--log-level", "debug"}, c.args...)...)
		from := logSize(t, m)
		p := m.path("f")
		for _, fl := range []int{os.O_WRONLY | os.O_CREATE, os.O_WRONLY, os.O_RDWR} {
			f, err := os.OpenFile(p, fl, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		log, err := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
		if err != nil {
			t.Fatal(err)
		}
		var replies []bool // DIRECT, for each CREATE or OPEN reply
		pending := map[string]bool{}
		for _, line := range strings.Split(string(log[from:]), "\n") {
			if rx := openRequest.FindStringSubmatch(line); rx != nil {
				pending[rx[1]] = true
			} else if tx := fuseReply.FindStringSubmatch(line); tx != nil && pending[tx[1]] {
				delete(pending, tx[1])
				replies = append(replies, strings.Contains(line, "DIRECT"))
			}
		}
		want := []bool{c.direct, c.direct, false}
		if !slices.Equal(replies, want) {
			t.Errorf("args %v: CREATE, O_WRONLY and O_RDWR opens answered direct %v, want %v", c.args, replies, want)
		}
	}
}

var (
	openRequest = regexp.MustCompile(`rx (\d+): (?:CREATE|OPEN) `)
	fuseReply   = regexp.MustCompile(`tx (\d+): `)
)
