package journal

import (
	"os"
	"sync"
	"testing"
	"time"
)

// TestWriteThrough: with WriteThrough, a record is in its segment file
// (the page cache, which survives a killed process) once Append returns,
// also when Append ran while another caller was syncing; without it,
// unsynced records stay in the process's buffer. A copy of the directory
// stands for what a process that was killed leaves.
func TestWriteThrough(t *testing.T) {
	for _, wt := range []bool{false, true} {
		dir := t.TempDir()
		o := testOptions(nil)
		o.WriteThrough = wt
		j := mustOpen(t, dir, o)
		appendN(t, j, 0, 2, false) // synced
		for i := 2; i < 5; i++ {
			if _, err := j.Append(payloadFor(i)); err != nil {
				t.Fatal(err)
			}
		}
		j.waitSpare() // a segment being made in the background
		j2 := mustOpen(t, copyDir(t, dir), testOptions(nil))
		got := replayAll(t, j2, 0)
		j2.Close()
		want := 2
		if wt {
			want = 5
		}
		checkRecords(t, got, 1, 0, want)
		j.Close()
	}
}

// TestWriteThroughDuringSync: appends made while a slow sync holds the
// writer role are written by that syncing caller before it returns.
func TestWriteThroughDuringSync(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(nil)
	o.WriteThrough = true
	inSync := make(chan struct{}, 1)
	o.SyncFile = func(f *os.File) error {
		select {
		case inSync <- struct{}{}:
		default:
		}
		time.Sleep(50 * time.Millisecond)
		return fdatasync(f)
	}
	j := mustOpen(t, dir, o)
	defer j.Close()
	seq, err := j.Append(payloadFor(0))
	if err != nil {
		t.Fatal(err)
	}
	// The open may have synced (recovery); drain its token.
	select {
	case <-inSync:
	default:
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := j.Sync(seq); err != nil {
			t.Error(err)
		}
	}()
	<-inSync
	for i := 1; i < 4; i++ {
		if _, err := j.Append(payloadFor(i)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	j.waitSpare()
	j2 := mustOpen(t, copyDir(t, dir), testOptions(nil))
	defer j2.Close()
	checkRecords(t, replayAll(t, j2, 0), 1, 0, 4)
}

// TestWriteWaitsForSync: Write returns only once its record is in the
// segment file, also when it was appended while a slow sync held the
// writer role (Append left it in the buffer).
func TestWriteWaitsForSync(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(nil)
	inSync := make(chan struct{}, 1)
	o.SyncFile = func(f *os.File) error {
		select {
		case inSync <- struct{}{}:
		default:
		}
		time.Sleep(50 * time.Millisecond)
		return fdatasync(f)
	}
	j := mustOpen(t, dir, o)
	defer j.Close()
	seq, err := j.Append(payloadFor(0))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-inSync:
	default:
	}
	go j.Sync(seq)
	<-inSync
	seq2, err := j.Append(payloadFor(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Write(seq2); err != nil {
		t.Fatal(err)
	}
	j.waitSpare()
	j2 := mustOpen(t, copyDir(t, dir), testOptions(nil))
	defer j2.Close()
	checkRecords(t, replayAll(t, j2, 0), 1, 0, 2)
}
