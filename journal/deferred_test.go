package journal

import "testing"

// TestAppendDeferred: with WriteThrough, a record appended with
// AppendDeferred stays in the process's buffer (a killed process loses
// it) until the next record written through, which writes both, in
// order. A copy of the directory stands for what a killed process leaves.
func TestAppendDeferred(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(nil)
	o.WriteThrough = true
	j := mustOpen(t, dir, o)
	defer j.Close()
	appendN(t, j, 0, 2, false) // synced
	if _, err := j.AppendDeferred(payloadFor(2)); err != nil {
		t.Fatal(err)
	}
	j.waitSpare()
	killed := func() int {
		j2 := mustOpen(t, copyDir(t, dir), testOptions(nil))
		defer j2.Close()
		got := replayAll(t, j2, 0)
		return len(got)
	}
	if n := killed(); n != 2 {
		t.Fatalf("a deferred record was written before a record written through: %d records, want 2", n)
	}
	if _, err := j.Append(payloadFor(3)); err != nil {
		t.Fatal(err)
	}
	j2 := mustOpen(t, copyDir(t, dir), testOptions(nil))
	got := replayAll(t, j2, 0)
	j2.Close()
	checkRecords(t, got, 1, 0, 4)
}
