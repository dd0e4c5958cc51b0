//go:build linux

package tests

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvfs/kvfs/internal/testutil"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// integrityClients are the clients of the integrity tests
// (integrity_test.go), run by runClient like those in clients.
var integrityClients = map[string]func(args []string) error{
	"iread":  iread,
	"iwrite": iwrite,
}

// Integrity files check themselves: a reader verifies any read-back
// without knowing which version of a name it got. A file starts with a
// 32-byte header:
//
//	[0:4]   magic "KVIC"
//	[4:8]   crc32 (IEEE) of [8:32]
//	[8:16]  length of the whole file
//	[16:24] seed
//	[24:28] shared: bytes [32, shared) derive from seed 0, the same in
//	        every file, so that versions share chunks
//	[28:32] zeros: bytes [shared, shared+zeros) are zero (a hole)
//
// and every other byte derives from its offset and the seed, so a pread at
// any offset can be checked against the header read through the same
// descriptor.
const (
	icMagic  = "KVIC"
	icHeader = 32
)

type icHeaderInfo struct {
	length, seed  uint64
	shared, zeros uint32
}

// icFile builds an integrity file.
func icFile(h icHeaderInfo) []byte {
	b := make([]byte, h.length)
	icExpect(b, 0, h)
	copy(b, icEncode(h))
	return b
}

// icRandom picks a random integrity file: 4 KiB to 3 MiB, sizes unaligned;
// one in three has a hole (a run of zeros). With dedup, half of them
// start with a run of the bytes that every such file has at the same
// offsets, so that versions share chunks and releasing one must keep
// what the others use.
func icRandom(r *rand.Rand, dedup bool) []byte {
	n := 4096 + r.IntN(3<<20-4096+1)
	h := icHeaderInfo{length: uint64(n), seed: r.Uint64() | 1}
	if dedup && r.IntN(2) == 0 {
		h.shared = uint32(r.IntN(n/2 + 1))
	}
	h.shared = max(h.shared, icHeader)
	if r.IntN(3) == 0 {
		h.zeros = uint32(r.IntN(n - int(h.shared) + 1))
	}
	return icFile(h)
}

func icEncode(h icHeaderInfo) []byte {
	b := make([]byte, icHeader)
	copy(b, icMagic)
	binary.LittleEndian.PutUint64(b[8:], h.length)
	binary.LittleEndian.PutUint64(b[16:], h.seed)
	binary.LittleEndian.PutUint32(b[24:], h.shared)
	binary.LittleEndian.PutUint32(b[28:], h.zeros)
	binary.LittleEndian.PutUint32(b[4:], crc32.ChecksumIEEE(b[8:]))
	return b
}

func icDecode(b []byte) (icHeaderInfo, bool) {
	if len(b) < icHeader || string(b[:4]) != icMagic || binary.LittleEndian.Uint32(b[4:]) != crc32.ChecksumIEEE(b[8:icHeader]) {
		return icHeaderInfo{}, false
	}
	h := icHeaderInfo{
		length: binary.LittleEndian.Uint64(b[8:]),
		seed:   binary.LittleEndian.Uint64(b[16:]),
		shared: binary.LittleEndian.Uint32(b[24:]),
		zeros:  binary.LittleEndian.Uint32(b[28:]),
	}
	return h, h.length >= icHeader
}

// icExpect fills p with the payload bytes at off of the file h describes
// (header bytes are left to the caller).
func icExpect(p []byte, off int64, h icHeaderInfo) {
	var word uint64
	for i := range p {
		o := off + int64(i)
		switch {
		case o < icHeader:
			continue
		case o < int64(h.shared):
			if i == 0 || o%8 == 0 || o == icHeader {
				word = splitmix(uint64(o / 8))
			}
		case o < int64(h.shared)+int64(h.zeros):
			p[i] = 0
			continue
		default:
			if i == 0 || o%8 == 0 || o == int64(h.shared)+int64(h.zeros) {
				word = splitmix(h.seed*0x9e3779b97f4a7c15 + uint64(o/8))
			}
		}
		p[i] = byte(word >> (8 * (o % 8)))
	}
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// icReport counts the outcomes of integrity checks: good reads, and bad
// ones by kind with the first few examples of each. Clients print theirs as one
// JSON line (icReportPrefix); the test merges them.
type icReport struct {
	Reads    int            // reads checked and found good
	Writes   int            // files written
	Bad      map[string]int // bad outcomes by kind
	Examples []string
}

const icReportPrefix = "integrity-report "

func (r *icReport) bad(kind, format string, args ...any) {
	if r.Bad == nil {
		r.Bad = map[string]int{}
	}
	r.Bad[kind]++
	r.example(kind + ": " + fmt.Sprintf(format, args...))
}

// example keeps an example of a bad outcome, up to 3 of each kind.
func (r *icReport) example(e string) {
	kind, _, _ := strings.Cut(e, ": ")
	n := 0
	for _, x := range r.Examples {
		if strings.HasPrefix(x, kind+": ") {
			n++
		}
	}
	if n < 3 {
		r.Examples = append(r.Examples, e)
	}
}

func (r *icReport) merge(o icReport) {
	r.Reads += o.Reads
	r.Writes += o.Writes
	for k, v := range o.Bad {
		if r.Bad == nil {
			r.Bad = map[string]int{}
		}
		r.Bad[k] += v
	}
	for _, e := range o.Examples {
		r.example(e)
	}
}

func (r *icReport) print() error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Printf("%s%s\n", icReportPrefix, b)
	return nil
}

// errKind names an error for a report: its errno when it has one.
func errKind(op string, err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.ENOENT:
			return op + " ENOENT"
		case syscall.ESTALE:
			return op + " ESTALE"
		case syscall.EIO:
			return op + " EIO"
		}
		return op + " " + en.Error()
	}
	return op + " error"
}

// icVerify checks p, read at off of the file h describes, and counts a
// mismatch: "zeroed bytes" when the wrong bytes are zeros. what names the
// read in the example. It reports whether p was right.
func icVerify(r *icReport, what string, p, scratch []byte, off int64, h icHeaderInfo) bool {
	if off < icHeader {
		skip := min(icHeader-off, int64(len(p)))
		p, off = p[skip:], off+skip
	}
	want := scratch[:len(p)]
	icExpect(want, off, h)
	kind, i, zeros, ok := testutil.Mismatch(p, want)
	if ok {
		return true
	}
	r.bad(kind, "%s (length %d, seed %d): byte %d is %#x, not %#x; %d zero bytes from there", what, h.length, h.seed, off+int64(i), p[i], want[i], zeros)
	return false
}

// icCheck is the one check every reader runs: it opens path, fstats it,
// reads it to EOF (through read(2), or through a shared mapping when mmap
// is set; a reader through read(2) fstats before or after reading, at
// random) and checks the bytes and their count against the header, then
// preads at random offsets and checks those. A name that must exist
// (stable) must open, and read whole; a volatile name may be missing, or
// be read while being written: then a prefix of it must be right.
func icCheck(r *icReport, rng *rand.Rand, path string, stable, mmap bool, buf, scratch []byte) icResult {
	f, err := os.Open(path)
	if err != nil {
		// A volatile name is unlinked and made again in a loop: its open
		// may find it gone (ENOENT), never ESTALE: the lookup's lease
		// keeps the version it found for the open (fs/filelease.go).
		if stable || !errors.Is(err, syscall.ENOENT) {
			r.bad(errKind("open", err), "%s: %v", path, err)
		}
		return icResult{}
	}
	defer f.Close()
	// A reader that maps needs the size first; one that reads may read
	// first, as a program that knows its offsets does, and fstat after:
	// then the read has only the kernel's cached size to go by.
	statFirst := mmap || rng.IntN(2) == 0
	var size int64
	fstat := func() bool {
		fi, err := f.Stat()
		if err != nil {
			r.bad(errKind("fstat", err), "%s: %v", path, err)
			return false
		}
		size = fi.Size()
		return true
	}
	if statFirst && !fstat() {
		return icResult{}
	}
	var got []byte
	if mmap {
		if got, err = readMapped(f, size, buf); err != nil {
			r.bad(errKind("mmap", err), "%s (size %d): %v", path, size, err)
			return icResult{}
		}
	} else {
		n, err := io.ReadFull(f, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			r.bad(errKind("read", err), "%s after %d bytes: %v", path, n, err)
			return icResult{n: n}
		}
		got = buf[:n]
	}
	if !statFirst && !fstat() {
		return icResult{n: len(got)}
	}
	statNote := fmt.Sprintf("fstat size %d", size)
	if !statFirst {
		statNote += " after the read"
	}
	h, ok := icDecode(got)
	res := icResult{h: h, n: len(got)}
	if !ok {
		switch {
		case !stable && len(got) < icHeader:
			r.Reads++ // a volatile file just created
		case len(got) < icHeader:
			r.bad("short read", "%s: %d bytes, %s, no whole header", path, len(got), statNote)
		case bytes.Count(got[:icHeader], []byte{0}) == icHeader:
			r.bad("zeroed bytes", "%s: header is zeros (%d bytes read, %s)", path, len(got), statNote)
		default:
			r.bad("wrong bytes", "%s: bad header %x (%d bytes read, %s)", path, got[:icHeader], len(got), statNote)
		}
		return res
	}
	switch n := uint64(len(got)); {
	case n > h.length:
		r.bad("long read", "%s: read %d bytes, its header says %d (%s)", path, n, h.length, statNote)
		return res
	case n < h.length && stable:
		r.bad("short read", "%s: read %d bytes, its header says %d (%s)", path, n, h.length, statNote)
		icVerify(r, path+" (short)", got, scratch, 0, h)
		return res
	case stable && uint64(size) != h.length:
		r.bad("fstat size", "%s: %s, read %d bytes as its header says", path, statNote, n)
	}
	if !icVerify(r, path, got, scratch, 0, h) {
		return res
	}
	if !mmap {
		// The descriptor holds one version: preads anywhere in it agree.
		end := int64(len(got))
		for range 4 {
			off := rng.Int64N(end)
			p := buf[:min(int64(1+rng.IntN(256<<10)), end-off)]
			n, err := f.ReadAt(p, off)
			if n < len(p) && stable {
				r.bad(errKind("pread", err), "%s: %d of %d bytes at %d: %v", path, n, len(p), off, err)
				return res
			}
			if !icVerify(r, fmt.Sprintf("%s pread at %d", path, off), p[:n], scratch, off, h) {
				return res
			}
		}
	}
	r.Reads++
	res.ok = true
	return res
}

// icResult is what icCheck read: the header (if any), how many bytes the
// whole read returned, and whether everything was right.
type icResult struct {
	h  icHeaderInfo
	n  int
	ok bool
}

// readMapped maps size bytes of f shared, copies them into buf and unmaps
// them. A fault on the mapping (SIGBUS: the file is shorter than its
// size said) is an error, not a crash.
func readMapped(f *os.File, size int64, buf []byte) (got []byte, err error) {
	if size == 0 {
		return nil, nil
	}
	if size > int64(len(buf)) {
		return nil, fmt.Errorf("size %d larger than any file written", size)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	defer syscall.Munmap(m)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("fault reading the mapping: %v", p)
		}
	}()
	return buf[:copy(buf, m)], nil
}

// icBuf is big enough for any integrity file, with room to see a read
// that runs past its length.
func icBuf() []byte { return make([]byte, 3<<20+64<<10) }

// iread MODE DURATION SEED PATH...: check PATHs (chosen at random) with
// icCheck until DURATION has passed; MODE is read or mmap; a PATH starting
// with "?" is volatile (may be missing or being written). Prints a report.
func iread(args []string) error {
	d, err := time.ParseDuration(args[1])
	if err != nil {
		return err
	}
	var seed uint64
	fmt.Sscan(args[2], &seed)
	rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	paths := args[3:]
	buf, scratch := icBuf(), icBuf()
	var r icReport
	for end := time.Now().Add(d); time.Now().Before(end); {
		p := paths[rng.IntN(len(paths))]
		stable := !strings.HasPrefix(p, "?")
		icCheck(&r, rng, strings.TrimPrefix(p, "?"), stable, args[0] == "mmap", buf, scratch)
	}
	return r.print()
}

// iwrite FLAGS DURATION SEED PATH...: write integrity files to PATHs
// (chosen at random) until DURATION has passed. FLAGS, comma-separated:
// "rename" writes DIR/.tmp-PID-N and renames it over the path (else the
// path is rewritten in place with O_TRUNC); "fsync" syncs before close;
// "unlink" removes the path before writing it; "readback" opens the path
// after the write and checks it with icCheck; "exclusive" says no one else
// writes these paths, so the read-back must be exactly what was written;
// "dedup" makes files share chunks (see icRandom).
// Prints a report; failed writes count as bad.
func iwrite(args []string) error {
	flags := map[string]bool{}
	for _, f := range strings.Split(args[0], ",") {
		flags[f] = true
	}
	d, err := time.ParseDuration(args[1])
	if err != nil {
		return err
	}
	var seed uint64
	fmt.Sscan(args[2], &seed)
	rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	paths := args[3:]
	buf, scratch := icBuf(), icBuf()
	var r icReport
	last := map[string]uint64{} // length last written to each path
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		path := paths[rng.IntN(len(paths))]
		b := icRandom(rng, flags["dedup"])
		if flags["unlink"] {
			if err := os.Remove(path); err != nil && !errors.Is(err, syscall.ENOENT) {
				r.bad(errKind("unlink", err), "%s: %v", path, err)
			}
		}
		dst := path
		if flags["rename"] {
			dst = filepath.Join(filepath.Dir(path), fmt.Sprintf(".tmp-%d-%d", os.Getpid(), i))
		}
		if err := icWriteFile(dst, b, flags["fsync"]); err != nil {
			r.bad(errKind("write", err), "%v", err)
			continue
		}
		if flags["rename"] {
			if err := os.Rename(dst, path); err != nil {
				r.bad(errKind("rename", err), "%v", err)
				continue
			}
		}
		r.Writes++
		wrote, _ := icDecode(b)
		if flags["readback"] {
			icReadBack(&r, rng, path, wrote, last[path], flags["exclusive"], buf, scratch)
		}
		last[path] = wrote.length
	}
	return r.print()
}

// icReadBack checks a file just written (and closed): through icCheck,
// and, when the writer is the only one, that it is what was written — a
// read-back of the previous size or of 0 bytes is the stale-attribute
// failure and is counted as such.
func icReadBack(r *icReport, rng *rand.Rand, path string, wrote icHeaderInfo, prev uint64, exclusive bool, buf, scratch []byte) {
	var check icReport
	res := icCheck(&check, rng, path, true, false, buf, scratch)
	if exclusive && res.ok && res.h != wrote {
		check.bad("other version", "%s: wrote length %d seed %d, read back length %d seed %d", path, wrote.length, wrote.seed, res.h.length, res.h.seed)
	}
	if exclusive && check.Bad["short read"] > 0 {
		// Name the short read by what it returned.
		switch n := uint64(res.n); {
		case n == 0:
			check.bad("short read (0 bytes)", "%s: wrote %d bytes, read back none", path, wrote.length)
		case n == prev:
			check.bad("short read (old size)", "%s: wrote %d bytes, read back %d, the previous size", path, wrote.length, n)
		}
	}
	r.merge(check)
}

func icWriteFile(path string, b []byte, fsync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if fsync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
