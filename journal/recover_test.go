package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setupSynced writes n records, each synced on its own (so each record
// after the first carries a synced watermark proving the earlier ones were
// durable), closes, and returns the dir and the head segment.
func setupSynced(t *testing.T, n int, syncEach bool) (dir, head string) {
	t.Helper()
	dir = t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	appendN(t, j, 0, n, syncEach)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	live := liveSegFiles(t, dir)
	return dir, live[len(live)-1]
}

// TestTornTailEveryOffset: the last record cut at every byte offset (the
// rest zeros, as in a preallocated segment, or the file itself cut short)
// is dropped with a log line; appending goes on after the last valid
// record, and the new record survives another reopen.
func TestTornTailEveryOffset(t *testing.T) {
	const n = 20
	dir, head := setupSynced(t, n, true)
	offs, lens := recordOffsets(t, head)
	last, size := offs[len(offs)-1], lens[len(lens)-1]
	orig, err := os.ReadFile(head)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"zeros", "short"} {
		for cut := range size {
			d := copyDir(t, dir)
			p := strings.Replace(head, dir, d, 1)
			switch mode {
			case "zeros":
				patch(t, p, last+cut, make([]byte, size-cut))
			case "short":
				if err := os.Truncate(p, last+cut); err != nil {
					t.Fatal(err)
				}
			}
			var lb logBuf
			j := mustOpen(t, d, testOptions(&lb))
			checkRecords(t, replayAll(t, j, 0), 1, 0, n-1)
			logged := strings.Contains(lb.String(), "dropped a torn tail")
			if cut > 0 && !logged {
				t.Fatalf("%s cut at %d: no log line; log: %s", mode, cut, lb.String())
			}
			if cut == 0 && logged {
				t.Fatalf("%s cut at 0 (a clean end) logged a torn tail", mode)
			}
			if seq := appendN(t, j, 1000, 1, true)[0]; seq != n {
				t.Fatalf("%s cut at %d: next seq %d, want %d", mode, cut, seq, n)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j = mustOpen(t, d, testOptions(nil))
			got := replayAll(t, j, 0)
			checkRecords(t, got[:n-1], 1, 0, n-1)
			if len(got) != n || !bytes.Equal(got[n-1].payload, payloadFor(1000)) {
				t.Fatalf("%s cut at %d: %d records after reappend", mode, cut, len(got))
			}
			j.Close()
		}
	}
	_ = orig
}

// TestFlippedLastRecords: a flipped byte anywhere in the last record, or
// in the last two records written by one Sync, is a torn tail: dropped
// with a log line, never an error.
func TestFlippedLastRecords(t *testing.T) {
	const n = 10
	dir, head := setupSynced(t, n, true)
	offs, lens := recordOffsets(t, head)
	last := len(offs) - 1
	for i := range lens[last] {
		d := copyDir(t, dir)
		p := strings.Replace(head, dir, d, 1)
		flipByte(t, p, offs[last]+i)
		var lb logBuf
		j := mustOpen(t, d, testOptions(&lb))
		checkRecords(t, replayAll(t, j, 0), 1, 0, n-1)
		if !strings.Contains(lb.String(), "dropped a torn tail") {
			t.Fatalf("flip at %d of the last record: no log line: %s", i, lb.String())
		}
		j.Close()
	}

	// The last batch (one Sync for several records): damage in its first
	// record with its later records intact is what a crash during the
	// Sync leaves when pages reach the disk out of order. None of them
	// was acknowledged, so they are dropped, and the segment is sealed.
	dir, head = setupSynced(t, n, false)
	offs, _ = recordOffsets(t, head)
	flipByte(t, head, offs[n-3]+recHeaderSize)
	var lb logBuf
	j := mustOpen(t, dir, testOptions(&lb))
	checkRecords(t, replayAll(t, j, 0), 1, 0, n-3)
	if !strings.Contains(lb.String(), "records that no later record shows synced") {
		t.Fatalf("no log line: %s", lb.String())
	}
	// The next record goes to a new segment: the leftovers (valid records
	// n-1 and n of the old life) can never pass for records written now.
	appendN(t, j, 100, 3, true)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if live := liveSegFiles(t, dir); live[len(live)-1] == head {
		t.Fatal("the segment with leftovers still takes appends")
	}
	j = mustOpen(t, dir, testOptions(nil))
	defer j.Close()
	got := replayAll(t, j, 0)
	checkRecords(t, got[:n-3], 1, 0, n-3)
	checkRecords(t, got[n-3:], n-2, 100, 3)
}

// TestCorruptMiddleRecord: a flipped byte in a record that a later valid
// record proves was durable is an error naming the segment and the
// record's offset, at every byte of the record.
func TestCorruptMiddleRecord(t *testing.T) {
	const n = 10
	dir, head := setupSynced(t, n, true)
	offs, lens := recordOffsets(t, head)
	for _, victim := range []int{0, 4, n - 2} {
		for i := range lens[victim] {
			d := copyDir(t, dir)
			p := strings.Replace(head, dir, d, 1)
			flipByte(t, p, offs[victim]+i)
			j, err := Open(d, testOptions(nil))
			if err == nil {
				j.Close()
				t.Fatalf("record %d, byte %d flipped: Open succeeded", victim, i)
			}
			ce := wantCorrupt(t, err, p, offs[victim])
			if ce.Seq != uint64(victim+1) {
				t.Fatalf("error names seq %d, want %d", ce.Seq, victim+1)
			}
		}
	}
}

// TestCorruptSealedSegment: damage in a segment that is not the last one
// is an error naming it and the offset: a segment switch syncs the old
// segment before the new one's header is written, so the next header
// proves every record before it was durable.
func TestCorruptSealedSegment(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	appendN(t, j, 0, 1000, false)
	j.Close()
	live := liveSegFiles(t, dir)
	if len(live) < 3 {
		t.Fatalf("%d segments", len(live))
	}
	p := live[1]
	offs, lens := recordOffsets(t, p)
	k := len(offs) / 2
	flipByte(t, p, offs[k]+lens[k]-1) // the CRC
	_, err := Open(dir, testOptions(nil))
	wantCorrupt(t, err, p, offs[k])

	// The last record of a sealed segment, too: not a torn tail.
	dir2 := t.TempDir()
	j = mustOpen(t, dir2, testOptions(nil))
	appendN(t, j, 0, 1000, false)
	j.Close()
	p = liveSegFiles(t, dir2)[0]
	offs, _ = recordOffsets(t, p)
	k = len(offs) - 1
	flipByte(t, p, offs[k]+recHeaderSize)
	_, err = Open(dir2, testOptions(nil))
	wantCorrupt(t, err, p, offs[k])
}

// TestMissingSegment: a live segment that disappears (or whose header is
// destroyed) leaves a gap: an error, not a silent skip.
func TestMissingSegment(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	appendN(t, j, 0, 1000, false)
	j.Close()
	live := liveSegFiles(t, dir)
	patch(t, live[1], 0, make([]byte, segHeaderSize))
	_, err := Open(dir, testOptions(nil))
	offs, lens := recordOffsets(t, live[0])
	wantCorrupt(t, err, live[0], offs[len(offs)-1]+lens[len(lens)-1])
}

// TestStaleEpochNotReplayed: a record with the right sequence number and a
// valid CRC but another life's epoch (a recycled segment's leftover, or
// a segment from another journal) ends the log.
func TestStaleEpochNotReplayed(t *testing.T) {
	dir := t.TempDir()
	const epoch, old = 0x1111, 0x2222
	craftSegment(t, dir, 1, testSegSize, segHeader{epoch: epoch, firstSeq: 10},
		frame(10, 9, epoch, "a"), frame(11, 10, epoch, "b"),
		frame(12, 11, old, "stale"), frame(13, 12, old, "stale"))
	j := mustOpen(t, dir, testOptions(nil))
	got := replayAll(t, j, 0)
	if len(got) != 2 || got[0].seq != 10 || string(got[1].payload) != "b" {
		t.Fatalf("replayed %v", got)
	}
	if seq := appendN(t, j, 0, 1, true)[0]; seq != 12 {
		t.Fatalf("next seq %d", seq)
	}
	j.Close()

	// Stale records of an earlier life of this segment (lower seqs).
	dir = t.TempDir()
	craftSegment(t, dir, 1, testSegSize, segHeader{epoch: epoch, firstSeq: 500},
		frame(500, 0, epoch, "new"), frame(201, 0, old, "old life"), frame(202, 0, old, "old life"))
	var lb logBuf
	j = mustOpen(t, dir, testOptions(&lb))
	defer j.Close()
	if got := replayAll(t, j, 0); len(got) != 1 || string(got[0].payload) != "new" {
		t.Fatalf("replayed %v", got)
	}
	if strings.Contains(lb.String(), "torn") {
		t.Fatalf("leftovers of an earlier life logged as torn: %s", lb.String())
	}
}

// TestRecycledSegmentStale: through the API: segments freed by Truncate
// and reused still hold their earlier records past the new ones; after
// reopen none of them is replayed.
func TestRecycledSegmentStale(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	appendN(t, j, 0, 1000, false)
	if err := j.Truncate(900); err != nil {
		t.Fatal(err)
	}
	freed := map[string]bool{}
	for _, s := range j.free {
		freed[s.path] = true
	}
	if len(freed) == 0 {
		t.Fatal("nothing freed")
	}
	// Fill the current segment and move into a recycled one, a few records in.
	for {
		appendN(t, j, 5000, 1, true)
		if head := j.chain[len(j.chain)-1]; freed[head.path] && head.end > 1000 {
			break
		}
	}
	head := j.chain[len(j.chain)-1]
	want := replayAll(t, j, 0)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(head.path)
	if bytes.Count(b, recMagic[:]) < 20 {
		t.Fatal("the recycled segment holds no leftovers: the test proves nothing")
	}
	j = mustOpen(t, dir, testOptions(nil))
	defer j.Close()
	got := replayAll(t, j, 0)
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].seq != want[i].seq || !bytes.Equal(got[i].payload, want[i].payload) {
			t.Fatalf("record %d differs", i)
		}
	}
}

// TestHostileLength: a record header claiming a huge payload is rejected
// by the bound, not allocated for.
func TestHostileLength(t *testing.T) {
	dir := t.TempDir()
	const epoch = 0x77
	bad := frame(2, 1, epoch, "x")
	bad[4], bad[5], bad[6], bad[7] = 0xff, 0xff, 0xff, 0xff
	craftSegment(t, dir, 1, testSegSize, segHeader{epoch: epoch, firstSeq: 1}, frame(1, 0, epoch, "ok"), bad)
	var lb logBuf
	j := mustOpen(t, dir, testOptions(&lb))
	defer j.Close()
	if got := replayAll(t, j, 0); len(got) != 1 {
		t.Fatalf("replayed %d", len(got))
	}
	if !strings.Contains(lb.String(), "torn") {
		t.Fatal("no log line")
	}
}

// TestDamagedOnlyHeader: a directory whose segments all have damaged
// headers is an error (starting over at seq 1 would let a caller's
// checkpoint skip every new record).
func TestDamagedOnlyHeader(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	appendN(t, j, 0, 5, true)
	j.Close()
	head := liveSegFiles(t, dir)[0]
	flipByte(t, head, 20)
	// Its records were synced (a later one says so): the header's damage
	// is named; without that proof, the missing header is.
	if _, err := Open(dir, testOptions(nil)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "header is missing or damaged") {
		t.Fatalf("Open: %v", err)
	}
}

// TestSealEmptySegment: the last segment's first record is damaged and a
// valid record no sync covered follows. The segment gets a new epoch
// rather than a successor beginning at the same seq (two segments
// claiming one first seq cannot be ordered); the leftover never replays.
// Found by TestPowerLoss.
func TestSealEmptySegment(t *testing.T) {
	dir := t.TempDir()
	const a, b = 0xa, 0xb
	craftSegment(t, dir, 1, testSegSize, segHeader{}) // free: the first to be reused
	craftSegment(t, dir, 2, testSegSize, segHeader{epoch: a, firstSeq: 1},
		frame(1, 0, a, "one"), frame(2, 1, a, "two"), frame(3, 2, a, "three"))
	torn := frame(4, 3, b, "four")
	torn[recHeaderSize] ^= 1
	craftSegment(t, dir, 3, testSegSize, segHeader{epoch: b, firstSeq: 4}, torn, frame(5, 3, b, "five, never synced"))
	var lb logBuf
	j := mustOpen(t, dir, testOptions(&lb))
	if !strings.Contains(lb.String(), "records that no later record shows synced") {
		t.Fatalf("log: %s", lb.String())
	}
	appendN(t, j, 0, 1, true)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		j = mustOpen(t, dir, testOptions(nil))
		got := replayAll(t, j, 0)
		if len(got) != 4 || string(got[2].payload) != "three" || !bytes.Equal(got[3].payload, payloadFor(0)) {
			t.Fatalf("replayed %d records: %v", len(got), got)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLostHeaderOfSyncedSegment: the last segment's header is zeroed,
// flipped or damaged after its records were synced (a later record of the
// segment says so). Its records cannot be dropped as a torn tail: Open
// fails with ErrCorrupt, naming the segment. Truncated journals, whose
// recycled segments keep old records behind zeroed headers, still open.
func TestLostHeaderOfSyncedSegment(t *testing.T) {
	dir := t.TempDir()
	j := mustOpen(t, dir, testOptions(nil))
	// Payloads of 4 KiB, each synced: several segments of 64 KiB.
	for i := range 60 {
		seq, err := j.Append(bytes.Repeat([]byte{byte(i)}, 4096))
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Sync(seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	live := liveSegFiles(t, dir)
	if len(live) < 3 {
		t.Fatalf("%d live segments, want several", len(live))
	}
	head := live[len(live)-1]
	for _, damage := range []string{"zeros", "flip", "magic"} {
		d := copyDir(t, dir)
		p := strings.Replace(head, dir, d, 1)
		switch damage {
		case "zeros":
			patch(t, p, 0, make([]byte, segHeaderSize))
		case "flip":
			flipByte(t, p, 20)
		case "magic":
			flipByte(t, p, 0)
		}
		_, err := Open(d, testOptions(nil))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(p)) {
			t.Errorf("%s: Open: %v", damage, err)
		}
	}

	// Recycled segments: truncate all but the head, append more (the
	// free ones are reused with their old records behind a new header, or
	// wait, zeroed, with them), reopen.
	j = mustOpen(t, dir, testOptions(nil))
	last := appendN(t, j, 1000, 3, true)
	if err := j.Truncate(last[len(last)-1] - 1); err != nil {
		t.Fatal(err)
	}
	appendN(t, j, 2000, 40, true)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = mustOpen(t, dir, testOptions(nil))
	j.Close()
}

// TestClosedCleanTailIsNoTornTail: after a clean close, bytes after the
// last record that are not a record (leftovers of a recycled segment's
// earlier life, starting mid-record) are the end of the log, logged at
// debug level, not a torn tail warned of; the records are all there and
// appending goes on after them. Without ClosedClean the same bytes are
// warned of as before (red team, F2: a warning after clean restarts).
func TestClosedCleanTailIsNoTornTail(t *testing.T) {
	const n = 12
	dir, head := setupSynced(t, n, true)
	offs, lens := recordOffsets(t, head)
	end := offs[len(offs)-1] + lens[len(lens)-1]
	leftover := bytes.Repeat([]byte{0x5c, 0x13, 0xe7}, 300)
	for _, clean := range []bool{true, false} {
		d := copyDir(t, dir)
		patch(t, strings.Replace(head, dir, d, 1), end, leftover)
		var lb logBuf
		opts := testOptions(&lb)
		opts.ClosedClean = clean
		j := mustOpen(t, d, opts)
		checkRecords(t, replayAll(t, j, 0), 1, 0, n)
		warned := strings.Contains(lb.String(), "dropped a torn tail")
		if warned == clean {
			t.Fatalf("closed clean %v: warned of a torn tail %v; log: %s", clean, warned, lb.String())
		}
		if seq := appendN(t, j, 500, 1, true)[0]; seq != n+1 {
			t.Fatalf("closed clean %v: next seq %d", clean, seq)
		}
		j.Close()
	}
}
