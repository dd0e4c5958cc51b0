package fdlimit

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestReporterOncePerKind: the first EMFILE and the first ENFILE are
// logged, with the limit and the descriptor count; repeats and other
// errors are not.
func TestReporterOncePerKind(t *testing.T) {
	var buf bytes.Buffer
	r := NewReporter(slog.New(slog.NewTextHandler(&buf, nil)), "test")
	emfile := &fs.PathError{Op: "open", Path: "/x", Err: syscall.EMFILE}
	for i := 0; i < 3; i++ {
		if !r.Note(fmt.Errorf("create spool: %w", emfile)) {
			t.Fatal("EMFILE not recognised through wrapping")
		}
	}
	if r.Note(fs.ErrNotExist) || r.Note(nil) {
		t.Fatal("other errors reported as descriptor shortage")
	}
	r.Note(syscall.ENFILE)
	r.Note(syscall.ENFILE)
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Fatalf("want 2 lines (one per kind), got %d:\n%s", n, out)
	}
	lim, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RLIMIT_NOFILE", "fs.file-max", fmt.Sprintf("nofile_soft=%d", lim.Soft),
		fmt.Sprintf("nofile_hard=%d", lim.Hard), "open_fds="} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "open_fds=-1") {
		t.Errorf("descriptor count missing:\n%s", out)
	}
}

// TestOpenCounts: Open counts a descriptor opened meanwhile.
func TestOpenCounts(t *testing.T) {
	before := Open()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := Open(); got != before+1 {
		t.Fatalf("open descriptors %d, then %d after one more", before, got)
	}
}
