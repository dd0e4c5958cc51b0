package journal

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fuzzOptions: tiny segments and payload bound; no fdatasync (durability
// is not what the fuzzer checks, and it makes every run slow).
func fuzzOptions() Options {
	return Options{SegmentSize: 4096, MaxPayload: 1024, SyncFile: func(*os.File) error { return nil }}
}

// FuzzReplay opens a journal whose two segment files hold arbitrary
// bytes. Open must fail with an error or recover without panicking or
// allocating beyond the bounds; what it recovers must replay in strict
// sequence order, and survive an append, a close and a second open
// unchanged (recovery is idempotent), followed by the new record.
func FuzzReplay(f *testing.F) {
	f.Fuzz(func(t *testing.T, seg1, seg2 []byte) {
		if len(seg1) > 1<<20 || len(seg2) > 1<<20 {
			return
		}
		dir := fuzzDir(t)
		for i, b := range [][]byte{seg1, seg2} {
			if len(b) == 0 {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, segName(i+1)), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		// A free segment, so that Open does not create one (a directory
		// fsync per run) for the first segment switch.
		if err := os.WriteFile(filepath.Join(dir, segName(9)), make([]byte, fuzzOptions().SegmentSize), 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := Open(dir, fuzzOptions())
		if err != nil {
			return
		}
		var first []rec
		var prev uint64
		err = j.Replay(0, func(seq uint64, p []byte) error {
			if prev != 0 && seq != prev+1 {
				return fmt.Errorf("seq %d after %d", seq, prev)
			}
			if len(p) > fuzzOptions().MaxPayload {
				return fmt.Errorf("payload of %d bytes", len(p))
			}
			prev = seq
			first = append(first, rec{seq, bytes.Clone(p)})
			return nil
		})
		if err != nil {
			t.Fatalf("replay after a successful open: %v", err)
		}
		seq, err := j.Append([]byte("fuzz"))
		if err != nil {
			t.Fatal(err)
		}
		if prev != 0 && seq != prev+1 {
			t.Fatalf("append got seq %d after %d", seq, prev)
		}
		if err := j.Sync(seq); err != nil {
			t.Fatal(err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		j, err = Open(dir, fuzzOptions())
		if err != nil {
			t.Fatalf("second open: %v", err)
		}
		defer j.Close()
		second := replayAll(t, j, 0)
		if len(second) != len(first)+1 {
			t.Fatalf("second open replays %d records, want %d", len(second), len(first)+1)
		}
		for i, r := range first {
			if second[i].seq != r.seq || !bytes.Equal(second[i].payload, r.payload) {
				t.Fatalf("record %d changed across reopen", i)
			}
		}
		if last := second[len(second)-1]; last.seq != seq || string(last.payload) != "fuzz" {
			t.Fatalf("appended record replays as %d %q", last.seq, last.payload)
		}
	})
}

// fuzzDir is a temporary directory in memory where there is one
// (/dev/shm): the fuzzer checks parsing and recovery logic, and a disk's
// directory fsyncs would make each run cost milliseconds.
func fuzzDir(t *testing.T) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "kvfs-journal-fuzz-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzReplay")

// TestFuzzReplayCorpus keeps the seed corpus honest: it must exist, and
// it is rebuilt from journals this package writes with -update-corpus:
// a valid journal, one spanning two segments, torn and flipped tails, a
// damaged middle record, stale records of another life.
func TestFuzzReplayCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReplay")
	if *updateCorpus {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, segs := range corpusSeeds(t) {
			var b bytes.Buffer
			b.WriteString("go test fuzz v1\n")
			for _, s := range segs {
				fmt.Fprintf(&b, "[]byte(%q)\n", s)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) < 5 {
		t.Fatalf("seed corpus %s: %d files, %v (regenerate with -update-corpus)", dir, len(ents), err)
	}
}

// corpusSeeds builds the seed journals: pairs of segment files.
func corpusSeeds(t *testing.T) map[string][2][]byte {
	t.Helper()
	seeds := map[string][2][]byte{}
	build := func(n int, syncEach bool) (seg1, seg2 []byte) {
		dir := t.TempDir()
		o := fuzzOptions()
		j := mustOpen(t, dir, o)
		for i := range n {
			seq, err := j.Append(payloadFor(i))
			if err != nil {
				t.Fatal(err)
			}
			if syncEach {
				if err := j.Sync(seq); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		live := liveSegFiles(t, dir)
		read := func(p string) []byte {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			// Trim trailing zeros: the fuzzer works on the bytes that matter.
			return bytes.TrimRight(b, "\x00")
		}
		seg1 = read(live[0])
		if len(live) > 1 {
			seg2 = read(live[1])
		}
		return seg1, seg2
	}
	one, _ := build(8, true)
	seeds["valid"] = [2][]byte{one, nil}
	a, b := build(40, false)
	if b == nil {
		t.Fatal("40 records fit one 4 KiB segment")
	}
	seeds["two-segments"] = [2][]byte{a, b}
	seeds["torn"] = [2][]byte{one[:len(one)-7], nil}
	flip := bytes.Clone(one)
	flip[len(flip)-3] ^= 0xff
	seeds["flipped-last"] = [2][]byte{flip, nil}
	mid := bytes.Clone(one)
	mid[segHeaderSize+recOverhead+10] ^= 0xff
	seeds["damaged-middle"] = [2][]byte{mid, nil}
	const epoch, old = 5, 6
	seeds["stale"] = [2][]byte{append(append(segHeader{epoch: epoch, firstSeq: 3}.marshal(),
		frame(3, 2, epoch, "new")...), frame(1, 0, old, "old life")...), nil}
	seeds["empty"] = [2][]byte{segHeader{epoch: epoch, firstSeq: 1}.marshal(), nil}
	return seeds
}

var _ = errors.Is
