package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestMkdirTrustedRace: a directory that another user makes on the path
// between the check and the mkdir of init (in a sticky directory, as
// /tmp) is not used: init fails, and nothing is made inside it.
func TestMkdirTrustedRace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files of another user") // CI runs as root
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(shared, "nd", "store")
	real, err := TrustedDir(want)
	if err != nil {
		t.Fatal(err)
	}
	// The other user wins the race: nd is theirs.
	nd := filepath.Join(shared, "nd")
	if err := os.Mkdir(nd, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chown(nd, 1234, 1234)
	if err := mkdirTrusted(real); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("mkdir through a directory another user made meanwhile: %v, want ErrNotOwner", err)
	}
	if ents, _ := os.ReadDir(nd); len(ents) != 0 {
		t.Fatalf("init made %d entries in the other user's directory", len(ents))
	}
	// Unraced, it makes the path and passes.
	ok := filepath.Join(shared, "ok", "store")
	real, err = TrustedDir(ok)
	if err != nil {
		t.Fatal(err)
	}
	if err := mkdirTrusted(real); err != nil {
		t.Fatal(err)
	}
	// A store directory that others may write is refused, sticky or not.
	for _, mode := range []os.FileMode{0o777, 0o770, os.ModeSticky | 0o777} {
		os.Chmod(ok, mode)
		if _, err := TrustedDir(ok); !errors.Is(err, ErrNotOwner) {
			t.Errorf("store directory of mode %v: %v, want ErrNotOwner", mode, err)
		}
	}
}
