//go:build linux

package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Cost proportional to the change (issue 9): a file opened for writing is
// not copied, an fsync commits only the chunks written since the last one,
// and chunks written whole in order are hashed as they arrive. These tests
// drive the mount from client processes and compare with models.

// spoolRand is the deterministic content of the tests' files.
func spoolRand(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func atoi64(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// spoolBytes is how many bytes the files of a spool directory occupy on
// disk (their allocated blocks: a sparse spool's holes take none).
func spoolBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n, nil
}

// The word files of the racing test: every 8-byte word says which word it
// is and which generation of the writer wrote it, so a reader can tell
// old and new bytes (both fine) from zeros or misplaced bytes (never).
const wordMagic = 0xA5

func word(i int64, gen uint64) uint64 { return wordMagic<<56 | uint64(i)<<16 | gen&0xffff }

func putWords(b []byte, first int64, gen uint64) {
	for k := 0; k+8 <= len(b); k += 8 {
		binary.LittleEndian.PutUint64(b[k:], word(first+int64(k/8), gen))
	}
}

func init() {
	// spoolsum FILE: print FILE's length and sha256, read in one process.
	clients["spoolsum"] = func(args []string) error {
		b, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		fmt.Printf("%d %x\n", len(b), sha256.Sum256(b))
		return nil
	}
	// spoolfill FILE SIZE SEED: create FILE with SIZE bytes of
	// spoolRand(SEED) in 1 MiB writes, fsync, close.
	clients["spoolfill"] = func(args []string) error {
		b := spoolRand(int(atoi64(args[1])), uint64(atoi64(args[2])))
		f, err := os.Create(args[0])
		if err != nil {
			return err
		}
		for off := 0; off < len(b); off += 1 << 20 {
			if _, err := f.Write(b[off:min(off+1<<20, len(b))]); err != nil {
				return err
			}
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return f.Close()
	}
	// spoolpatch FILE OFF N SEED SPOOLDIR: open the existing FILE
	// read-write, write N bytes of spoolRand(SEED) at OFF, print how many
	// bytes the spool directory occupies then ("spool BYTES"), fsync and
	// close.
	clients["spoolpatch"] = func(args []string) error {
		f, err := os.OpenFile(args[0], os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(spoolRand(int(atoi64(args[2])), uint64(atoi64(args[3]))), atoi64(args[1])); err != nil {
			return err
		}
		n, err := spoolBytes(args[4])
		if err != nil {
			return err
		}
		fmt.Printf("spool %d\n", n)
		if err := f.Sync(); err != nil {
			return err
		}
		return f.Close()
	}
	// wordwriter FILE WORDS ITERS SEED: write FILE as WORDS words of
	// generation 0 and commit it; then ITERS times write a random run of
	// words (up to 192 KiB, at any word) with the iteration's generation,
	// fsyncing every 4 and closing and reopening (without O_TRUNC) every
	// 16; finally check the file against the model.
	clients["wordwriter"] = func(args []string) error {
		path, words, iters := args[0], atoi64(args[1]), int(atoi64(args[2]))
		r := rand.New(rand.NewPCG(uint64(atoi64(args[3])), 7))
		model := make([]byte, words*8)
		putWords(model, 0, 0)
		if err := os.WriteFile(path, model, 0o644); err != nil {
			return err
		}
		fmt.Println("ready")
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		for g := 1; g <= iters; g++ {
			s := r.Int64N(words)
			n := 1 + r.Int64N(min(words-s, 24576))
			putWords(model[s*8:(s+n)*8], s, uint64(g))
			if _, err := f.WriteAt(model[s*8:(s+n)*8], s*8); err != nil {
				return fmt.Errorf("write gen %d: %w", g, err)
			}
			if g%4 == 0 {
				if err := f.Sync(); err != nil {
					return fmt.Errorf("fsync gen %d: %w", g, err)
				}
			}
			if g%16 == 0 {
				if err := f.Close(); err != nil {
					return err
				}
				if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
					return err
				}
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, model) {
			return fmt.Errorf("final content differs from the model (%d vs %d bytes)", len(got), len(model))
		}
		return nil
	}
	// wordreader FILE WORDS STOP: until the file STOP exists, read FILE
	// whole (256 KiB preads through one descriptor, reopened every 8
	// rounds) and check that it is WORDS words long and every word is a
	// word of its place, of some generation; print the rounds.
	clients["wordreader"] = func(args []string) error {
		path, words, stop := args[0], atoi64(args[1]), args[2]
		buf := make([]byte, 256<<10)
		rounds := 0
		for ; ; rounds++ {
			if _, err := os.Stat(stop); err == nil && rounds > 0 {
				break
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			for k := 0; k < 8; k++ {
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				if fi.Size() != words*8 {
					return fmt.Errorf("round %d: size %d, want %d", rounds, fi.Size(), words*8)
				}
				for off := int64(0); off < words*8; off += int64(len(buf)) {
					want := min(int64(len(buf)), words*8-off)
					n, err := f.ReadAt(buf[:want], off)
					if int64(n) != want {
						return fmt.Errorf("round %d: short read at %d: %d of %d bytes (%v)", rounds, off, n, want, err)
					}
					for w := int64(0); w < want; w += 8 {
						v := binary.LittleEndian.Uint64(buf[w:])
						i := (off + w) / 8
						if v>>56 != wordMagic || int64(v>>16&0xffffffffff) != i {
							return fmt.Errorf("round %d: word %d (offset %d) reads %#x: not a word of its place", rounds, i, off+w, v)
						}
					}
				}
			}
			f.Close()
		}
		fmt.Printf("%d rounds\n", rounds)
		return nil
	}
	// spoolops FILE LOCAL SEED N MAX: N random operations on FILE (in the
	// mount) and LOCAL (on disk) alike — writes at any offset and length,
	// truncations, fsyncs, reopens (some with O_TRUNC), reads through the
	// writing descriptor and through a separate read-only one — checking
	// after each that both have the same size and the bytes read are the
	// same; sizes stay under MAX.
	clients["spoolops"] = func(args []string) error {
		path, local := args[0], args[1]
		r := rand.New(rand.NewPCG(uint64(atoi64(args[2])), 11))
		n, maxSize := int(atoi64(args[3])), atoi64(args[4])
		open := func(flags int) (*os.File, *os.File, error) {
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|flags, 0o644)
			if err != nil {
				return nil, nil, err
			}
			l, err := os.OpenFile(local, os.O_RDWR|os.O_CREATE|flags, 0o644)
			return f, l, err
		}
		f, l, err := open(0)
		if err != nil {
			return err
		}
		compare := func(op string, rf *os.File, off, n int64) error {
			a, b := make([]byte, n), make([]byte, n)
			na, ea := rf.ReadAt(a, off)
			nb, eb := l.ReadAt(b, off)
			if na != nb || !bytes.Equal(a[:na], b[:nb]) || (ea == nil) != (eb == nil) {
				k := 0
				for k < min(na, nb) && a[k] == b[k] {
					k++
				}
				return fmt.Errorf("after %s: read %d bytes at %d: mount %d bytes (%v), disk %d (%v), first difference at %d",
					op, n, off, na, ea, nb, eb, off+int64(k))
			}
			return nil
		}
		var last string
		for i := 0; i < n; i++ {
			size, _ := l.Seek(0, io.SeekEnd)
			switch p := r.IntN(100); {
			case p < 45:
				off := r.Int64N(maxSize - 1)
				ln := 1 + r.Int64N(min(maxSize-off, []int64{100, 5000, 70000, 300000}[r.IntN(4)]))
				if r.IntN(3) == 0 {
					off = size // appends are common
					ln = min(ln, maxSize-off)
				}
				if ln <= 0 {
					continue
				}
				b := spoolRand(int(ln), r.Uint64())
				last = fmt.Sprintf("op %d: write %d at %d", i, ln, off)
				if _, err := f.WriteAt(b, off); err != nil {
					return fmt.Errorf("%s: %w", last, err)
				}
				if _, err := l.WriteAt(b, off); err != nil {
					return err
				}
			case p < 55:
				sz := r.Int64N(maxSize)
				if r.IntN(2) == 0 {
					sz = r.Int64N(size + 1) // shorter
				}
				last = fmt.Sprintf("op %d: truncate %d to %d", i, size, sz)
				if err := f.Truncate(sz); err != nil {
					return fmt.Errorf("%s: %w", last, err)
				}
				if err := l.Truncate(sz); err != nil {
					return err
				}
			case p < 65:
				last = fmt.Sprintf("op %d: fsync", i)
				if err := f.Sync(); err != nil {
					return fmt.Errorf("%s: %w", last, err)
				}
			case p < 72:
				flags := 0
				if r.IntN(5) == 0 {
					flags = os.O_TRUNC
				}
				last = fmt.Sprintf("op %d: reopen (flags %#x)", i, flags)
				if err := f.Close(); err != nil {
					return fmt.Errorf("%s: close: %w", last, err)
				}
				l.Close()
				if f, l, err = open(flags); err != nil {
					return fmt.Errorf("%s: %w", last, err)
				}
			case p < 90:
				off := r.Int64N(maxSize)
				if err := compare(last, f, off, 1+r.Int64N(200000)); err != nil {
					return err
				}
			default:
				ro, err := os.Open(path)
				if err != nil {
					return err
				}
				fi, err := ro.Stat()
				if err == nil && fi.Size() != size {
					err = fmt.Errorf("after %s: a new descriptor sees size %d, want %d", last, fi.Size(), size)
				}
				if err == nil {
					err = compare(last, ro, 0, size+10)
				}
				ro.Close()
				if err != nil {
					return err
				}
			}
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if size, _ := l.Seek(0, io.SeekEnd); fi.Size() != size {
				return fmt.Errorf("after %s: size %d, want %d", last, fi.Size(), size)
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		return l.Close()
	}
}

// TestRewriteCommitsChangedChunks: a client opens an existing 64 MiB file
// read-write and writes 4 KiB at an unaligned offset that straddles two
// chunks, then fsyncs. The spool holds only those chunks (not a copy of the
// file), the commit hashes (those not hashed while written) and stores only
// them (the daemon's metrics), and the file reads back exactly as the
// model, from a new process, after a remount too. With chunks every C
// bytes (chunking=fixed) the changed chunks are the two cells; with
// content cuts, the chunks the change touches, cut again.
func TestRewriteCommitsChangedChunks(t *testing.T) {
	for _, chunking := range []string{"fixed", "content"} {
		t.Run(chunking, func(t *testing.T) { rewriteCommitsChangedChunks(t, chunking) })
	}
}

func rewriteCommitsChangedChunks(t *testing.T, chunking string) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	kvfs(t, "config", m.store, "chunking="+chunking)
	const size = 64 << 20
	const C = 64 << 10
	p := m.path("big")
	runClientOK(t, "spoolfill", p, strconv.Itoa(size), "1")
	model := spoolRand(size, 1)
	off := int64(17*C - 1000) // 4 KiB across the boundary of chunks 16 and 17
	patch := spoolRand(4096, 2)
	copy(model[off:], patch)

	before := scrape(t, addr)
	out := runClientOK(t, "spoolpatch", p, strconv.FormatInt(off, 10), "4096", "2", filepath.Join(m.store, "spool"))
	after := scrape(t, addr)
	var spooled int64
	fmt.Sscanf(strings.TrimSpace(out), "spool %d", &spooled)
	t.Logf("spool after the write: %d bytes on disk", spooled)
	if spooled > 4*C {
		t.Errorf("the spool of a 4 KiB write into a 64 MiB file occupies %d bytes: the file was copied", spooled)
	}
	delta := func(name string) float64 { return counter(after, name) - counter(before, name) }
	t.Logf("commits %g, committed %g bytes, hashed %g, new %g, reused %g",
		delta("kvfs_commits_total"), delta("kvfs_commit_bytes_total"), delta("kvfs_commit_hashed_bytes_total"),
		delta("kvfs_ingest_new_bytes_total"), delta("kvfs_dedup_bytes_total"))
	if c := delta("kvfs_commits_total"); c != 1 {
		t.Errorf("%g commits, want 1 (the fsync; the close has nothing left)", c)
	}
	if chunking == "fixed" {
		// The first chunk, written to its end, may have been hashed while
		// written already.
		if h := delta("kvfs_commit_hashed_bytes_total"); h > 2*C || h < C {
			t.Errorf("the commit hashed %g bytes, want at most the 2 changed chunks (%d), at least the second", h, 2*C)
		}
		if n := delta("kvfs_ingest_new_bytes_total"); n != 2*C {
			t.Errorf("the commit stored %g new bytes, want the 2 changed chunks (%d)", n, 2*C)
		}
		if r := delta("kvfs_dedup_bytes_total"); r != size-2*C {
			t.Errorf("the commit reused %g bytes, want every unchanged chunk (%d)", r, size-2*C)
		}
	} else {
		// The changed cells and the content-cut chunks they touch (up to
		// C each side), cut again; the new chunks are those that hold the
		// 4 KiB, at most two cells' worth.
		if h := delta("kvfs_commit_hashed_bytes_total"); h > 4*C || h < 4096 {
			t.Errorf("the commit hashed %g bytes, want the chunks the change touches (at most %d)", h, 4*C)
		}
		if n := delta("kvfs_ingest_new_bytes_total"); n > 2*C || n < 4096 {
			t.Errorf("the commit stored %g new bytes, want the chunks holding the change (at most %d)", n, 2*C)
		}
		if r := delta("kvfs_dedup_bytes_total"); r < size-4*C {
			t.Errorf("the commit reused %g bytes, want every chunk the change does not touch (at least %d)", r, size-4*C)
		}
	}
	checkFile := func(when string) {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, model) {
			k := 0
			for k < min(len(got), len(model)) && got[k] == model[k] {
				k++
			}
			t.Fatalf("%s: content differs from the model at %d (%d bytes, want %d)", when, k, len(got), len(model))
		}
	}
	checkFile("after the fsync")
	kvfs(t, "unmount", m.mnt)
	waitUnmounted(t, m)
	m.start(t, "--metrics", addr)
	checkFile("after a remount")
}

// TestRewriteRacingReaders: while a client rewrites runs of words of a
// 4 MiB file in place (fsync every 4 writes, reopen every 16), two reader
// processes read it whole again and again: every read is full length and
// every word is a word of its place (old or new generation), never zeros
// or bytes from elsewhere; the writer's final check against its model
// passes.
func TestRewriteRacingReaders(t *testing.T) {
	m := newMount(t)
	const words = 512 << 10 // 4 MiB
	p := m.path("words")
	stop := filepath.Join(t.TempDir(), "stop")
	w := client("wordwriter", p, strconv.Itoa(words), "300", "3")
	wout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var werr bytes.Buffer
	w.Stderr = &werr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make([]byte, 6)
	if _, err := io.ReadFull(wout, ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("writer did not start: %q %v\n%s", ready, err, werr.String())
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]string, 2)
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := client("wordreader", p, strconv.Itoa(words), stop).CombinedOutput()
			outs[k], errs[k] = string(out), err
		}()
	}
	rest, _ := io.ReadAll(wout)
	if err := w.Wait(); err != nil {
		t.Errorf("writer: %v\n%s%s", err, rest, werr.String())
	}
	os.WriteFile(stop, nil, 0o644)
	wg.Wait()
	for k := range 2 {
		if errs[k] != nil {
			t.Errorf("reader %d: %v\n%s", k, errs[k], outs[k])
		} else {
			t.Logf("reader %d: %s", k, strings.TrimSpace(outs[k]))
		}
	}
}

// TestTruncateThenExtend: an existing 3 MiB file opened read-write is cut
// into the middle of a chunk, written past its end (leaving a hole) and
// extended by truncate, then committed: it reads back as the model (the
// kept bytes, then zeros, the write, zeros), from another process, before
// and after the commit.
func TestTruncateThenExtend(t *testing.T) {
	m := newMount(t)
	p := m.path("f")
	runClientOK(t, "spoolfill", p, strconv.Itoa(3<<20), "4")
	model := spoolRand(3<<20, 4)
	cut := int64(1<<20 + 1234)
	model = append(model[:cut:cut], make([]byte, 5<<20-cut)...)
	w := spoolRand(100, 5)
	copy(model[2<<20+7:], w)

	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(w, 2<<20+7); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(5 << 20); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		got := runClientOK(t, "spoolsum", p)
		want := fmt.Sprintf("%d %x", len(model), sha256.Sum256(model))
		if strings.TrimSpace(got) != want {
			t.Fatalf("%s: another process reads %q, want %q", when, strings.TrimSpace(got), want)
		}
	}
	check("before the commit")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	check("after the fsync")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	check("after the close")
}

// TestSpoolRandomOps: random writes, truncations, fsyncs, reopens and
// reads of a file in the mount, done alike to a file on the local disk by
// a client that compares the two after every operation; then the test
// compares the files whole.
func TestSpoolRandomOps(t *testing.T) {
	m := newMount(t)
	dir := t.TempDir()
	for seed := 1; seed <= 3; seed++ {
		p, local := m.path(fmt.Sprintf("ops%d", seed)), filepath.Join(dir, fmt.Sprintf("ops%d", seed))
		runClientOK(t, "spoolops", p, local, strconv.Itoa(seed), "400", strconv.Itoa(3<<20))
		a, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(local)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: the mount's file (%d bytes) differs from the local one (%d)", seed, len(a), len(b))
		}
	}
}
