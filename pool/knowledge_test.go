package pool_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestKnowledgeSurvivesRestart: a host that published a file and restarts
// still knows its chunks (the local index, knowledge.go), so publishing
// the same bytes under a new name uploads nothing new; a damaged index is
// set aside, not fatal, and the host works on.
func TestKnowledgeSurvivesRestart(t *testing.T) {
	s := startServices(t)
	cacheDir := t.TempDir()
	data := randBytes(700_000, 51)
	a := s.host(t, s.config(t, cacheDir))
	if err := a.Publish(ctx, "one", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	known := a.Stats().KnownChunks
	a.Close()
	before, n := packBytes(t, s)
	a2 := s.host(t, s.config(t, cacheDir))
	if got := a2.Stats().KnownChunks; got != known || got < 700_000/(64<<10) {
		t.Fatalf("after a restart the host knows %d chunks, want the %d it published (700000 bytes in chunks of at most 64 KiB)", got, known)
	}
	if err := a2.Publish(ctx, "two", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if after, n2 := packBytes(t, s); after != before || n2 != n {
		t.Fatalf("publishing known bytes after a restart uploaded packs: %d → %d bytes", before, after)
	}
	a2.Close()

	if err := os.WriteFile(filepath.Join(cacheDir, "known.db"), []byte("not a bolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	a3 := s.host(t, s.config(t, cacheDir))
	if _, err := os.Stat(filepath.Join(cacheDir, "known.db.bad")); err != nil {
		t.Fatalf("the damaged index was not set aside: %v", err)
	}
	readBack(t, a3, "two", data)
}
