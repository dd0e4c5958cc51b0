//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/store"
)

// Reuse of buffers under load: the buffers of spools in memory and of the
// journal's data records come from a pool (internal/bufpool) and are
// reused. A buffer reused while anything still reads it shows as bytes of
// another file. (Found by red team 24.)
//
// Every file of these tests is written from two patterns of its own id:
// F (its final bytes) and G = F^0x80 (bytes overwritten later), both never
// zero. So at any moment, through any handle, every byte of any file is
// 0, F[i] or G[i]; a byte of another file's buffer fails that with
// probability 253/256. Each file's operations are a pure function of its
// id (reusePlan), so a reader knows what a committed file must hold.

// reuseOp is one step of a file's plan.
type reuseOp struct {
	k      byte // w: write F[off:off+n]; g: write G[...]; t: ftruncate(off); s: fsync; R: reopen; T: reopen O_TRUNC; m: rename while open; u: unlink while open; c: check
	off, n int64
}

const (
	reuseKindBlock = iota
	reuseKindGrow
	reuseKindTruncRegrow
	reuseKindOTrunc
	reuseKindRewrite
	reuseKindRenamed
	reuseKindUnlinked
	reuseKindHoles
	reuseKinds
)

// reusePattern is F for id, n bytes, never zero.
func reusePattern(id uint64, n int64) []byte {
	r := rand.New(rand.NewPCG(id, 0x5eed))
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v>>(8*k)) | 1
		}
	}
	return b[:n]
}

// reuseSize is a size: mostly small and unaligned, some past 1 MiB.
func reuseSize(r *rand.Rand) int64 {
	switch x := r.IntN(100); {
	case x < 45:
		return 1 + r.Int64N(300<<10)
	case x < 80:
		return 300<<10 + r.Int64N(724<<10)
	case x < 88:
		return 1<<20 - 64 + r.Int64N(128) // around the bound
	default:
		return 1<<20 + r.Int64N(400<<10)
	}
}

// pieces cuts [a, b) into unaligned pieces, in order.
func reusePieces(r *rand.Rand, a, b int64, maxPiece int64) [][2]int64 {
	var out [][2]int64
	for a < b {
		n := min(b-a, 1+r.Int64N(maxPiece))
		out = append(out, [2]int64{a, n})
		a += n
	}
	return out
}

// reusePlan is the kind and the operations of file id, and the length of
// the patterns it uses.
func reusePlan(id uint64) (int, []reuseOp, int64) {
	r := rand.New(rand.NewPCG(id, 77))
	kind := int(id % reuseKinds)
	n := reuseSize(r)
	maxLen := n
	var ops []reuseOp
	add := func(k byte, off, n int64) { ops = append(ops, reuseOp{k, off, n}) }
	writeAll := func(k byte, a, b int64, shuffle bool) {
		ps := reusePieces(r, a, b, []int64{4096, 40000, 200000}[r.IntN(3)])
		if shuffle {
			r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		}
		for i, p := range ps {
			add(k, p[0], p[1])
			if r.IntN(6) == 0 || i == len(ps)-1 && r.IntN(2) == 0 {
				add('c', 0, 0)
			}
		}
	}
	switch kind {
	case reuseKindBlock:
		if r.IntN(3) == 0 {
			writeAll('g', 0, n, true)
		}
		writeAll('w', 0, n, true)
	case reuseKindGrow:
		// In order, growing past the bound of a spool in memory in
		// part of them (spill), read back as it grows.
		n = 700<<10 + r.Int64N(700<<10)
		maxLen = n
		writeAll('w', 0, n, false)
	case reuseKindTruncRegrow:
		writeAll('w', 0, n, r.IntN(2) == 0)
		m := r.Int64N(n + 1)
		add('t', m, 0)
		add('c', 0, 0)
		n2 := m + 1 + r.Int64N(600<<10)
		add('t', n2, 0) // zeros in [m, n2)
		add('c', 0, 0)
		if n2 > maxLen {
			maxLen = n2
		}
		if r.IntN(2) == 0 {
			a := m + r.Int64N(n2-m)
			b := a + r.Int64N(n2-a+1)
			if b > a {
				add('w', a, b-a)
				add('c', 0, 0)
			}
		}
		if r.IntN(3) == 0 {
			add('s', 0, 0)
			add('t', m/2, 0)
			add('t', n2, 0)
			add('c', 0, 0)
		}
	case reuseKindOTrunc:
		writeAll('g', 0, n, true)
		add('s', 0, 0)
		add('T', 0, 0)
		add('c', 0, 0)
		n2 := reuseSize(r)
		if n2 > maxLen {
			maxLen = n2
		}
		writeAll('w', 0, n2, true)
	case reuseKindRewrite:
		writeAll('g', 0, n, false)
		add('s', 0, 0)
		if r.IntN(2) == 0 {
			add('R', 0, 0) // a new spool over the committed version
		}
		writeAll('w', 0, n, true)
	case reuseKindRenamed:
		h := n / 2
		writeAll('w', 0, h, true)
		add('m', 0, 0)
		writeAll('w', h, n, true)
	case reuseKindUnlinked:
		writeAll('g', 0, n, true)
		if r.IntN(2) == 0 {
			add('s', 0, 0)
		}
		add('u', 0, 0)
		writeAll('w', 0, n, true)
	case reuseKindHoles:
		// Scattered ranges; the rest are holes.
		for range 1 + r.IntN(12) {
			a := r.Int64N(n)
			b := a + 1 + r.Int64N(min(n-a, 100000))
			add('w', a, b-a)
			if r.IntN(3) == 0 {
				add('c', 0, 0)
			}
		}
		add('t', n, 0)
		add('c', 0, 0)
	}
	return kind, ops, maxLen
}

// reuseApply applies a write or truncation to the model.
func reuseApply(model []byte, o reuseOp, F []byte) []byte {
	switch o.k {
	case 'w', 'g':
		if end := o.off + o.n; end > int64(len(model)) {
			model = append(model, make([]byte, end-int64(len(model)))...)
		}
		for i := o.off; i < o.off+o.n; i++ {
			if o.k == 'w' {
				model[i] = F[i]
			} else {
				model[i] = F[i] ^ 0x80
			}
		}
	case 't':
		if o.off <= int64(len(model)) {
			clear(model[o.off:])
			model = model[:o.off]
		} else {
			model = append(model, make([]byte, o.off-int64(len(model)))...)
		}
	case 'T':
		model = model[:0]
	}
	return model
}

// reuseModel is file id's committed content, nil if it is unlinked.
func reuseModel(id uint64) []byte {
	kind, ops, maxLen := reusePlan(id)
	if kind == reuseKindUnlinked {
		return nil
	}
	F := reusePattern(id, maxLen)
	var model []byte
	for _, o := range ops {
		model = reuseApply(model, o, F)
	}
	return model
}

// reuseLegal checks that every byte of b (read at off of file id) is 0,
// F or G; it returns the first bad offset, or -1.
func reuseLegal(id uint64, b []byte, off int64) int64 {
	_, _, maxLen := reusePlan(id)
	F := reusePattern(id, maxLen)
	for i, v := range b {
		p := off + int64(i)
		if v == 0 {
			continue
		}
		if p >= int64(len(F)) || v != F[p] && v != F[p]^0x80 {
			return p
		}
	}
	return -1
}

// reuseReadDirect reads the whole file at p through an O_DIRECT descriptor
// (every byte from the daemon, none from the page cache), or through the
// page cache if cached.
func reuseReadDirect(p string, cached bool) ([]byte, error) {
	flags := os.O_RDONLY
	if !cached {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return reuseReadFD(f)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func reuseReadFD(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size() + 256<<10 // a file being written may grow
	raw := make([]byte, size+8192)
	a := 4096 - int(uintptrOf(raw)%4096)
	buf := raw[a : a+int(size)]
	n := 0
	for n < len(buf) {
		m, err := f.ReadAt(buf[n:min(len(buf), n+(1<<20))], int64(n))
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			// Not the end of the file: an error (ENOTCONN once the
			// daemon is killed) must not read as a short file.
			return nil, err
		}
	}
	return buf[:n], nil
}

// reuseWrite runs the plan of file id under dir: it returns a description
// of the first mismatch that a check of its own found. log, when set,
// gets "D PATH ID" once the file's last fsync returned and "R PATH ID" once
// it is renamed into place.
func reuseWrite(dir string, id uint64, log func(string), direct bool) (err error) {
	kind, ops, maxLen := reusePlan(id)
	F := reusePattern(id, maxLen)
	tdir := filepath.Join(dir, "t")
	if kind == reuseKindBlock {
		tdir = filepath.Join(dir, "b", "blocks")
	}
	path := filepath.Join(tdir, fmt.Sprintf("%d.tmp", id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var model []byte
	unlinked := false
	for i, o := range ops {
		switch o.k {
		case 'w', 'g':
			src := F[o.off : o.off+o.n]
			if o.k == 'g' {
				src = make([]byte, o.n)
				for k := range src {
					src[k] = F[o.off+int64(k)] ^ 0x80
				}
			}
			if _, err := f.WriteAt(src, o.off); err != nil {
				return fmt.Errorf("id %d op %d: %w", id, i, err)
			}
		case 't':
			if err := f.Truncate(o.off); err != nil {
				return fmt.Errorf("id %d op %d: %w", id, i, err)
			}
		case 's':
			if err := f.Sync(); err != nil {
				return fmt.Errorf("id %d op %d: %w", id, i, err)
			}
		case 'R', 'T':
			if err := f.Close(); err != nil {
				return fmt.Errorf("id %d op %d: close: %w", id, i, err)
			}
			flags := os.O_RDWR
			if o.k == 'T' {
				flags |= os.O_TRUNC
			}
			if f, err = os.OpenFile(path, flags, 0); err != nil {
				return fmt.Errorf("id %d op %d: reopen: %w", id, i, err)
			}
		case 'm':
			if err := os.Rename(path, path+"2"); err != nil {
				return fmt.Errorf("id %d op %d: %w", id, i, err)
			}
			path += "2"
		case 'u':
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("id %d op %d: %w", id, i, err)
			}
			unlinked = true
		case 'c':
			var got []byte
			var err error
			if unlinked {
				// Through the writer's own descriptor.
				got = make([]byte, len(model)+100)
				var n int
				n, err = f.ReadAt(got, 0)
				if err == io.EOF {
					err = nil
				}
				got = got[:n]
			} else {
				got, err = reuseReadDirect(path, !direct)
			}
			if err != nil {
				return fmt.Errorf("id %d op %d: check: %w", id, i, err)
			}
			if j := firstDiffB(got, model); j >= 0 {
				return fmt.Errorf("id %d kind %d op %d (%c %d %d): check read %d bytes, want %d: first difference at %d (got %#x, want %#x, F %#x)",
					id, kind, i, ops[max(i-1, 0)].k, ops[max(i-1, 0)].off, ops[max(i-1, 0)].n, len(got), len(model), j, at(got, j), at(model, j), at(F, j))
			}
		}
		model = reuseApply(model, o, F)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("id %d: fsync: %w", id, err)
	}
	if log != nil && !unlinked {
		log(fmt.Sprintf("D %s %d", path, id))
	}
	err = f.Close()
	f = nil
	if err != nil {
		return fmt.Errorf("id %d: close: %w", id, err)
	}
	if unlinked {
		return nil
	}
	final := filepath.Join(dir, "f", fmt.Sprint(id))
	if kind == reuseKindBlock {
		sum := sha256.Sum256(model)
		final = filepath.Join(dir, "b", "blocks", hex.EncodeToString(sum[:]))
	}
	if err := os.Rename(path, final); err != nil {
		return fmt.Errorf("id %d: rename into place: %w", id, err)
	}
	if log != nil {
		log(fmt.Sprintf("R %s %d", final, id))
	}
	got, err := reuseReadDirect(final, !direct)
	if err != nil {
		return fmt.Errorf("id %d: read back: %w", id, err)
	}
	if j := firstDiffB(got, model); j >= 0 {
		return fmt.Errorf("id %d kind %d: read back %d bytes after the rename, want %d: first difference at %d", id, kind, len(got), len(model), j)
	}
	return nil
}

func at(b []byte, i int) int {
	if i < len(b) {
		return int(b[i])
	}
	return -1
}

// firstDiffB is the first index where a and b differ (lengths too), or -1.
func firstDiffB(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// reuseVerify checks a file name under dir: a final file against its
// model (f/ID) or its name (b/blocks/SHA256), a file being written
// (*.tmp, *.tmp2) byte by byte against its patterns. It returns the bytes
// checked; a file that went meanwhile counts none.
func reuseVerify(p string, mode int) (int64, error) {
	name := filepath.Base(p)
	if mode == 2 && strings.Contains(name, ".tmp") {
		mode = 0 // a mapping of a file that shrinks faults
	}
	var got []byte
	var err error
	switch mode {
	case 0, 1:
		got, err = reuseReadDirect(p, mode == 1)
	case 2:
		got, err = reuseMmap(p)
	}
	if errors.Is(err, iofs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	switch {
	case strings.HasSuffix(name, ".tmp") || strings.HasSuffix(name, ".tmp2"):
		id, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSuffix(name, "2"), ".tmp"), 10, 64)
		if j := reuseLegal(id, got, 0); j >= 0 {
			return 0, fmt.Errorf("%s (being written, mode %d): byte %d of %d is %#x: neither 0 nor a byte this file was written", p, mode, j, len(got), got[j])
		}
	case filepath.Base(filepath.Dir(p)) == "blocks":
		sum := sha256.Sum256(got)
		if hex.EncodeToString(sum[:]) != name {
			return 0, fmt.Errorf("%s (mode %d): %d bytes whose sha256 is %x", p, mode, len(got), sum)
		}
	default:
		id, _ := strconv.ParseUint(name, 10, 64)
		want := reuseModel(id)
		if j := firstDiffB(got, want); j >= 0 {
			return 0, fmt.Errorf("%s (mode %d): read %d bytes, want %d: first difference at %d (got %#x, want %#x)", p, mode, len(got), len(want), j, at(got, j), at(want, j))
		}
	}
	return int64(len(got)), nil
}

// reuseMmap reads the file at p through a shared mapping (a copy of it).
func reuseMmap(p string) ([]byte, error) {
	m, err := mapFile(p)
	if err != nil || m == nil {
		return nil, err
	}
	defer syscall.Munmap(m)
	return bytes.Clone(m), nil
}

func init() {
	// reuse-write DIR FIRST COUNT THREADS INTERLEAVE DIRECT [LOG]: THREADS
	// goroutines write files FIRST..FIRST+COUNT-1 (reusePlan), each
	// goroutine INTERLEAVE files at a time.
	clients["reuse-write"] = func(args []string) error {
		dir := args[0]
		first, _ := strconv.ParseUint(args[1], 10, 64)
		count, _ := strconv.ParseUint(args[2], 10, 64)
		threads, _ := strconv.Atoi(args[3])
		inter, _ := strconv.Atoi(args[4])
		direct := args[5] == "1"
		var logf func(string)
		if len(args) > 6 {
			lf, err := os.OpenFile(args[6], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return err
			}
			var mu sync.Mutex
			logf = func(s string) { mu.Lock(); lf.WriteString(s + "\n"); mu.Unlock() }
		}
		for _, d := range []string{"t", "f", "b/blocks"} {
			os.MkdirAll(filepath.Join(dir, d), 0o755)
		}
		var next atomic.Uint64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		var done atomic.Int64
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var iwg sync.WaitGroup
				for range inter {
					iwg.Add(1)
					go func() {
						defer iwg.Done()
						for firstErr.Load() == nil {
							i := next.Add(1) - 1
							if i >= count {
								return
							}
							if err := reuseWrite(dir, first+i, logf, direct); err != nil {
								firstErr.CompareAndSwap(nil, err)
								return
							}
							done.Add(1)
						}
					}()
				}
				iwg.Wait()
			}()
		}
		wg.Wait()
		fmt.Printf("wrote %d files\n", done.Load())
		if e := firstErr.Load(); e != nil {
			return e.(error)
		}
		return nil
	}
	// reuse-read DIR STOPFILE: until STOPFILE exists, read every file
	// under DIR (f, t, b/blocks) by O_DIRECT, page cache and mmap in
	// turn, and check it (reuseVerify); prints the counts.
	clients["reuse-read"] = func(args []string) error {
		dir, stop := args[0], args[1]
		var files, tmp, nbytes int64
		for round := 0; ; round++ {
			if _, err := os.Stat(stop); err == nil && round > 0 {
				break
			}
			for _, d := range []string{"t", "b/blocks", "f"} {
				ents, _ := os.ReadDir(filepath.Join(dir, d))
				for i, e := range ents {
					n, err := reuseVerify(filepath.Join(dir, d, e.Name()), (round+i)%3)
					if err != nil {
						return err
					}
					if strings.Contains(e.Name(), ".tmp") {
						tmp++
					} else {
						files++
					}
					nbytes += n
				}
			}
		}
		fmt.Printf("verified %d final files, %d files being written, %d bytes\n", files, tmp, nbytes)
		return nil
	}
}

// reuseRaceLog sends the race reports of race-built kvfs processes (the
// daemon, the clients) to files that fail the test at its end.
func reuseRaceLog(t *testing.T) {
	raceLog := filepath.Join(t.TempDir(), "race")
	t.Setenv("GORACE", "log_path="+raceLog)
	t.Cleanup(func() {
		reports, _ := filepath.Glob(raceLog + ".*")
		for _, r := range reports {
			b, _ := os.ReadFile(r)
			t.Errorf("race report of a kvfs process (%s):\n%s", r, b)
		}
	})
}

// reuseRun writes count files from first with writers processes (threads
// goroutines each, interleave files at a time each) while readers
// processes check everything, and fails on any bad byte.
func reuseRun(t *testing.T, dir string, first, count uint64, writers, threads, interleave, readers int, direct bool) {
	stop := filepath.Join(t.TempDir(), "stop")
	var rcmds []*exec.Cmd
	var routs []*bytes.Buffer
	for range readers {
		c, out := startClient(t, "reuse-read", dir, stop)
		rcmds, routs = append(rcmds, c), append(routs, out)
	}
	var wcmds []*exec.Cmd
	var wouts []*bytes.Buffer
	per := count / uint64(writers)
	for w := range writers {
		c, out := startClient(t, "reuse-write", dir, fmt.Sprint(first+uint64(w)*per), fmt.Sprint(per), fmt.Sprint(threads), fmt.Sprint(interleave), map[bool]string{true: "1", false: "0"}[direct])
		wcmds, wouts = append(wcmds, c), append(wouts, out)
	}
	var failed bool
	for i, c := range wcmds {
		if err := c.Wait(); err != nil {
			t.Errorf("writer %d: %v\n%s", i, err, wouts[i])
			failed = true
		} else {
			t.Logf("writer %d: %s", i, strings.TrimSpace(wouts[i].String()))
		}
	}
	os.WriteFile(stop, nil, 0o644)
	for i, c := range rcmds {
		if err := c.Wait(); err != nil {
			t.Errorf("reader %d: %v\n%s", i, err, routs[i])
			failed = true
		} else {
			t.Logf("reader %d: %s", i, strings.TrimSpace(routs[i].String()))
		}
	}
	if failed {
		t.FailNow()
	}
}

// reuseVerifyAll checks every final file under dir and that every file of
// first..first+count-1 that is not unlinked is there.
func reuseVerifyAll(t *testing.T, dir string, first, count uint64) {
	t.Helper()
	var nfiles, nbytes int64
	for i := first; i < first+count; i++ {
		kind, _, _ := reusePlan(i)
		want := reuseModel(i)
		var p string
		switch kind {
		case reuseKindUnlinked:
			continue
		case reuseKindBlock:
			sum := sha256.Sum256(want)
			p = filepath.Join(dir, "b", "blocks", hex.EncodeToString(sum[:]))
		default:
			p = filepath.Join(dir, "f", fmt.Sprint(i))
		}
		got, err := reuseReadDirect(p, false)
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		if j := firstDiffB(got, want); j >= 0 {
			t.Fatalf("file %d (%s): read %d bytes, want %d: first difference at %d", i, p, len(got), len(want), j)
		}
		nfiles++
		nbytes += int64(len(got))
	}
	for _, d := range []string{"t"} {
		if ents, _ := os.ReadDir(filepath.Join(dir, d)); len(ents) > 0 {
			t.Fatalf("%d files left in %s: %s...", len(ents), d, ents[0].Name())
		}
	}
	t.Logf("verified %d committed files, %d bytes", nfiles, nbytes)
}

// TestBufReuseStress: writers of small files of every kind (blocks
// protocol, growth past 1 MiB, truncation and regrowth, O_TRUNC reopen,
// rewrites over a committed version, renamed and unlinked while open,
// holes), several open at once per thread, while other processes read
// every file, committed or being written, by O_DIRECT, page cache and
// mmap. Then a remount, every file again, and the store's check.
func TestBufReuseStress(t *testing.T) {
	count := uint64(160) // 480 with KVFS_STRESS=full
	if testutil.StressFull() {
		count = 480
	}
	if v := os.Getenv("KVFS_TEST_REUSE_FILES"); v != "" {
		count, _ = strconv.ParseUint(v, 10, 64)
	}
	for _, c := range []struct {
		name   string
		args   []string
		direct bool
	}{{"default", nil, true}, {"writeback_cache", []string{"-o", "writeback_cache"}, true}} {
		t.Run(c.name, func(t *testing.T) {
			reuseRaceLog(t)
			m := newMount(t, c.args...)
			dir := m.path("d")
			os.Mkdir(dir, 0o755)
			reuseRun(t, dir, 1000, count, 2, 3, 3, 1, c.direct)
			reuseVerifyAll(t, dir, 1000, count)
			sh(t, kvfsBin+" unmount "+m.mnt)
			m.check(t)
			m.start(t, c.args...)
			reuseVerifyAll(t, dir, 1000, count)
		})
	}
}

// TestBufReuseBudgetSpill: more spools open at once than the daemon's 64 MiB
// of spool memory holds (96 files of about 1 MiB, written in turns), so
// that spools spill when the budget cannot grow them, and buffers go back
// to the pool and out again in every order.
func TestBufReuseBudgetSpill(t *testing.T) {
	reuseRaceLog(t)
	m := newMount(t)
	dir := m.path("d")
	os.Mkdir(dir, 0o755)
	// 2 processes x 4 threads x 24 files at a time: all 192 open at once.
	reuseRun(t, dir, 5000, 192, 2, 4, 24, 1, true)
	reuseVerifyAll(t, dir, 5000, 192)
}

// TestBufReuseKillDaemon: SIGKILL the daemon while the writers and a reader
// run; after a remount every file whose last fsync returned holds its
// model (under its tmp name or its final name), every file left being
// written holds only bytes that were written to it, and the store checks.
func TestBufReuseKillDaemon(t *testing.T) {
	reuseRaceLog(t)
	m := newMount(t)
	dir := m.path("d")
	os.Mkdir(dir, 0o755)
	logPath := filepath.Join(t.TempDir(), "log")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 24))
	first := uint64(100000)
	var durable int
	for round := range 4 {
		if round > 0 {
			var args []string
			if round%2 == 1 {
				args = append(args, "--checkpoint-interval", "20ms")
			}
			m.start(t, args...)
		}
		stop := filepath.Join(t.TempDir(), "stop")
		rd, rout := startClient(t, "reuse-read", dir, stop)
		var cmds []*exec.Cmd
		var outs []*bytes.Buffer
		for w := range 2 {
			c, out := startClient(t, "reuse-write", dir, fmt.Sprint(first+uint64(w)*100000), "100000", "3", "2", "1", logPath)
			cmds, outs = append(cmds, c), append(outs, out)
		}
		first += 1000000
		time.Sleep(time.Duration(1500+r.IntN(2500)) * time.Millisecond)
		syscall.Kill(daemonPID(t, m), syscall.SIGKILL)
		for i, c := range cmds {
			c.Wait()
			// A writer fails once the mount is gone; a check that failed
			// before the kill would say so here.
			if s := outs[i].String(); strings.Contains(s, "first difference") || strings.Contains(s, "neither 0") {
				t.Fatalf("round %d writer %d: %s", round, i, s)
			}
		}
		os.WriteFile(stop, nil, 0o644)
		rd.Wait()
		if s := rout.String(); strings.Contains(s, "first difference") || strings.Contains(s, "neither 0") || strings.Contains(s, "sha256 is") {
			t.Fatalf("round %d reader: %s", round, s)
		}
		exec.Command(kvfsBin, "unmount", "--lazy", m.mnt).Run()
		s := m.openStore(t)
		if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
			s.Close()
			t.Fatalf("round %d: %v", round, err)
		}
		n := reuseCheckKillLog(t, s, m.mnt, logPath, round)
		durable += n
		t.Logf("round %d: %d files durable", round, n)
		s.Close()
	}
	t.Logf("%d durable files verified in all", durable)
	m.start(t)
}

// reuseCheckKillLog checks the store (daemon gone) against the writers'
// log and the patterns: it returns the files whose last fsync returned.
func reuseCheckKillLog(t *testing.T, s *store.Store, mnt, logPath string, round int) int {
	t.Helper()
	rel := func(p string) string { return strings.TrimPrefix(p, mnt+"/") }
	read := func(p string) ([]byte, error) { return readStored(s, p) }
	b, _ := os.ReadFile(logPath)
	type ent struct {
		tmp, final string
	}
	ents := map[uint64]*ent{}
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		fl := strings.Fields(sc.Text())
		if len(fl) != 3 {
			continue
		}
		id, _ := strconv.ParseUint(fl[2], 10, 64)
		if ents[id] == nil {
			ents[id] = &ent{}
		}
		if fl[0] == "D" {
			ents[id].tmp = rel(fl[1])
		} else {
			ents[id].final = rel(fl[1])
		}
	}
	n := 0
	for id, e := range ents {
		want := reuseModel(id)
		got, err := read(e.tmp)
		if err != nil {
			final := e.final
			if final == "" {
				kind, _, _ := reusePlan(id)
				if kind == reuseKindBlock {
					sum := sha256.Sum256(want)
					final = "d/b/blocks/" + hex.EncodeToString(sum[:])
				} else {
					final = "d/f/" + fmt.Sprint(id)
				}
			}
			if got, err = read(final); err != nil {
				t.Fatalf("round %d: file %d, fsynced as %s: neither it nor %s: %v", round, id, e.tmp, final, err)
			}
		}
		if j := firstDiffB(got, want); j >= 0 {
			t.Fatalf("round %d: file %d: %d bytes, want %d: first difference at %d", round, id, len(got), len(want), j)
		}
		n++
	}
	// Every final file holds its model.
	if es, err := s.List("d/f"); err == nil {
		for _, e := range es {
			id, _ := strconv.ParseUint(e.Name, 10, 64)
			got, err := read("d/f/" + e.Name)
			if err != nil {
				t.Fatal(err)
			}
			if j := firstDiffB(got, reuseModel(id)); j >= 0 {
				t.Fatalf("round %d: d/f/%s: first difference at %d", round, e.Name, j)
			}
		}
	}
	// Files left being written hold only their own bytes.
	for _, d := range []string{"d/t", "d/b/blocks"} {
		es, err := s.List(d)
		if err != nil {
			continue
		}
		for _, e := range es {
			if !strings.Contains(e.Name, ".tmp") {
				if d == "d/b/blocks" {
					got, err := read(d + "/" + e.Name)
					if err != nil {
						t.Fatal(err)
					}
					if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != e.Name {
						t.Fatalf("round %d: %s/%s holds other content", round, d, e.Name)
					}
				}
				continue
			}
			got, err := read(d + "/" + e.Name)
			if err != nil {
				t.Fatalf("round %d: %s/%s: %v", round, d, e.Name, err)
			}
			id, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSuffix(e.Name, "2"), ".tmp"), 10, 64)
			if j := reuseLegal(id, got, 0); j >= 0 {
				t.Fatalf("round %d: %s/%s left by the kill: byte %d is %#x, not written to it", round, d, e.Name, j, got[j])
			}
		}
	}
	return n
}

func init() {
	// reuse-mmapwrite DIR FIRST COUNT: files written through a shared
	// writable mapping (the kernel writes them back to the spool in
	// pages), grown by ftruncate first: page-sized writes at page
	// offsets, some of the pages left holes; msync, fsync, close, rename
	// to DIR/f/ID, read back by O_DIRECT.
	clients["reuse-mmapwrite"] = func(args []string) error {
		dir := args[0]
		first, _ := strconv.ParseUint(args[1], 10, 64)
		count, _ := strconv.ParseUint(args[2], 10, 64)
		os.MkdirAll(filepath.Join(dir, "m"), 0o755)
		os.MkdirAll(filepath.Join(dir, "mf"), 0o755)
		for id := first; id < first+count; id++ {
			want := reuseMmapModel(id)
			p := filepath.Join(dir, "m", fmt.Sprint(id))
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if err := f.Truncate(int64(len(want))); err != nil {
				return err
			}
			m, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
			if err != nil {
				return fmt.Errorf("mmap: %w", err)
			}
			r := rand.New(rand.NewPCG(id, 1))
			pages := r.Perm((len(want) + 4095) / 4096)
			for _, pg := range pages {
				a, b := pg*4096, min(pg*4096+4096, len(want))
				copy(m[a:b], want[a:b])
				if r.IntN(50) == 0 {
					syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), syscall.MS_SYNC)
				}
			}
			if _, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), syscall.MS_SYNC); e != 0 {
				return fmt.Errorf("msync: %v", e)
			}
			syscall.Munmap(m)
			if err := f.Sync(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			final := filepath.Join(dir, "mf", fmt.Sprint(id))
			if err := os.Rename(p, final); err != nil {
				return err
			}
			got, err := reuseReadDirect(final, false)
			if err != nil {
				return err
			}
			if j := firstDiffB(got, want); j >= 0 {
				return fmt.Errorf("mmap-written %d: read %d bytes, want %d: first difference at %d", id, len(got), len(want), j)
			}
		}
		return nil
	}
}

// reuseMmapModel: 1 byte to 1.2 MiB of F, a page in 7 left a hole.
func reuseMmapModel(id uint64) []byte {
	r := rand.New(rand.NewPCG(id, 2))
	n := 1 + r.Int64N(1200<<10)
	b := reusePattern(id, n)
	for pg := int64(0); pg*4096 < n; pg++ {
		if r.IntN(7) == 0 {
			clear(b[pg*4096 : min(pg*4096+4096, n)])
		}
	}
	return b
}

// TestBufReuseMmapWriters: writers through shared mappings beside the other
// writers and the reader; every mapped file is checked after a remount.
func TestBufReuseMmapWriters(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{{"default", nil}, {"writeback_cache", []string{"-o", "writeback_cache"}}} {
		t.Run(c.name, func(t *testing.T) {
			reuseRaceLog(t)
			m := newMount(t, c.args...)
			dir := m.path("d")
			os.Mkdir(dir, 0o755)
			var mcmds []*exec.Cmd
			var mouts []*bytes.Buffer
			for w := range 2 {
				c, out := startClient(t, "reuse-mmapwrite", dir, fmt.Sprint(20000+w*100), "30")
				mcmds, mouts = append(mcmds, c), append(mouts, out)
			}
			reuseRun(t, dir, 30000, 96, 2, 2, 2, 1, true)
			for i, c := range mcmds {
				if err := c.Wait(); err != nil {
					t.Fatalf("mmap writer %d: %v\n%s", i, err, mouts[i])
				}
			}
			sh(t, kvfsBin+" unmount "+m.mnt)
			m.check(t)
			m.start(t, c.args...)
			var n int64
			for w := range 2 {
				for id := uint64(20000 + w*100); id < uint64(20000+w*100+30); id++ {
					got, err := reuseReadDirect(filepath.Join(dir, "mf", fmt.Sprint(id)), false)
					want := reuseMmapModel(id)
					if err != nil || firstDiffB(got, want) >= 0 {
						t.Fatalf("mmap-written %d after a remount: %v, first difference at %d", id, err, firstDiffB(got, want))
					}
					n += int64(len(got))
				}
			}
			reuseVerifyAll(t, dir, 30000, 96)
			t.Logf("60 mmap-written files, %d bytes, verified after a remount", n)
		})
	}
}
