package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// logBuf collects a journal's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

const testSegSize = 64 << 10

// testOptions: small segments, logs into lb.
func testOptions(lb *logBuf) Options {
	o := Options{SegmentSize: testSegSize}
	if lb != nil {
		o.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

func mustOpen(t testing.TB, dir string, o Options) *Journal {
	t.Helper()
	j, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j
}

type rec struct {
	seq     uint64
	payload []byte
}

func replayAll(t testing.TB, j *Journal, after uint64) []rec {
	t.Helper()
	var out []rec
	err := j.Replay(after, func(seq uint64, p []byte) error {
		out = append(out, rec{seq, bytes.Clone(p)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return out
}

// payloadFor is a test payload that names its record: recognisable, and
// of varying length.
func payloadFor(i int) []byte {
	n := 1 + (i*37)%300
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i + k*7)
	}
	if n >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(i))
	}
	return b
}

// appendN appends payloadFor(from..from+n-1), each followed by Sync when
// syncEach, else one Sync at the end; it returns the sequence numbers.
func appendN(t testing.TB, j *Journal, from, n int, syncEach bool) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := from; i < from+n; i++ {
		seq, err := j.Append(payloadFor(i))
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		seqs = append(seqs, seq)
		if syncEach {
			if err := j.Sync(seq); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		}
	}
	if !syncEach && n > 0 {
		if err := j.Sync(seqs[len(seqs)-1]); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	return seqs
}

// checkRecords asserts got holds exactly payloadFor(from..) with
// sequence numbers firstSeq...
func checkRecords(t testing.TB, got []rec, firstSeq uint64, from, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("got %d records, want %d", len(got), n)
	}
	for k, r := range got {
		if r.seq != firstSeq+uint64(k) || !bytes.Equal(r.payload, payloadFor(from+k)) {
			t.Fatalf("record %d: seq %d (want %d), payload ok %v", k, r.seq, firstSeq+uint64(k), bytes.Equal(r.payload, payloadFor(from+k)))
		}
	}
}

// recordOffsets returns, for the records of one segment file, their
// offsets and lengths (framing included), as written.
func recordOffsets(t testing.TB, path string) (offs []int64, lens []int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, st := parseSegHeader(b)
	if st != headerValid {
		t.Fatalf("%s: header not valid", path)
	}
	off, seq := int64(segHeaderSize), h.firstSeq
	for off+recOverhead <= int64(len(b)) {
		rh, ok := parseRecHeader(b[off:])
		if !ok || rh.epoch != h.epoch || rh.seq != seq {
			break
		}
		n := recOverhead + int64(rh.length)
		if !checkRecordCRC(b[off : off+n]) {
			break
		}
		offs, lens = append(offs, off), append(lens, n)
		off += n
		seq++
	}
	return offs, lens
}

// segFiles lists the segment files of dir in number order.
func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// liveSegFiles lists the segment files with a valid header, by first sequence.
func liveSegFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	var firsts []uint64
	for _, p := range segFiles(t, dir) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, segHeaderSize)
		_, err = io.ReadFull(f, b)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if h, st := parseSegHeader(b); st == headerValid {
			i := 0
			for i < len(firsts) && firsts[i] < h.firstSeq {
				i++
			}
			firsts = append(firsts[:i], append([]uint64{h.firstSeq}, firsts[i:]...)...)
			out = append(out[:i], append([]string{p}, out[i:]...)...)
		}
	}
	return out
}

// copyDir copies the journal directory src to a new temporary one.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// patch overwrites bytes of a file.
func patch(t testing.TB, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// flipByte inverts one byte of a file.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	patch(t, path, off, []byte{^b[off]})
}

// craftSegment writes a segment file by hand: a header (or none when
// h.firstSeq is 0) and the given framed records back to back.
func craftSegment(t testing.TB, dir string, num int, size int64, h segHeader, recs ...[]byte) string {
	t.Helper()
	b := make([]byte, size)
	if h.firstSeq != 0 {
		copy(b, h.marshal())
	}
	off := segHeaderSize
	for _, r := range recs {
		off += copy(b[off:], r)
	}
	p := filepath.Join(dir, segName(num))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func frame(seq, synced, epoch uint64, payload string) []byte {
	return appendRecord(nil, seq, synced, epoch, []byte(payload))
}

func wantCorrupt(t testing.TB, err error, path string, off int64) *CorruptError {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("want a CorruptError, got %v", err)
	}
	if ce.Path != path || ce.Offset != off {
		t.Fatalf("CorruptError names %s offset %d, want %s offset %d (%v)", ce.Path, ce.Offset, path, off, err)
	}
	return ce
}

var _ = fmt.Sprintf
