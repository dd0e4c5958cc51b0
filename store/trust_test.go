package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfs/kvfs/store"
)

// TestTrustedDir: a store is opened only by its own user, and only below
// directories that no third user may change.
func TestTrustedDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files of another user") // CI runs as root
	}
	base := t.TempDir()
	mine := filepath.Join(base, "mine")
	if err := store.Init(mine, store.DefaultChunkSize); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(mine, store.Options{})
	if err != nil {
		t.Fatalf("open own store: %v", err)
	}
	s.Close()

	theirs := filepath.Join(base, "theirs")
	if err := store.InitAs(theirs, store.DefaultChunkSize, store.Owner{UID: 1234, GID: 1234}); err != nil {
		t.Fatal(err)
	}
	// The store's owner planted a link: opening must not get that far.
	victim := filepath.Join(base, "victim")
	os.WriteFile(victim, []byte("root's"), 0o600)
	os.Remove(filepath.Join(theirs, "reserve"))
	os.Symlink(victim, filepath.Join(theirs, "reserve"))
	if _, err := store.Open(theirs, store.Options{}); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("open of another user's store: %v, want ErrNotOwner", err)
	}
	if err := store.Init(theirs+"/../theirs", store.DefaultChunkSize); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("init over another user's directory: %v, want ErrNotOwner", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's" {
		t.Fatalf("the link's target changed: %q", b)
	}

	// A directory above the store that a third user owns, or that anyone
	// may write without the sticky bit, could swap the store.
	for _, c := range []struct {
		name string
		prep func(dir string) error
		ok   bool
	}{
		{"other's", func(d string) error { return os.Chown(d, 1234, 1234) }, false},
		{"group-writable", func(d string) error { return os.Chmod(d, 0o775) }, false},
		{"world-writable", func(d string) error { return os.Chmod(d, 0o777) }, false},
		{"sticky", func(d string) error { return os.Chmod(d, os.ModeSticky|0o777) }, true},
	} {
		parent := filepath.Join(base, c.name)
		dir := filepath.Join(parent, "store")
		if err := store.Init(dir, store.DefaultChunkSize); err != nil {
			t.Fatal(err)
		}
		if err := c.prep(parent); err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(dir, store.Options{})
		if c.ok && err != nil || !c.ok && !errors.Is(err, store.ErrNotOwner) {
			t.Errorf("%s parent: open: %v (want ok: %v)", c.name, err, c.ok)
		}
		if err == nil {
			s.Close()
		}
	}
	// A link to a trusted store is followed, and the store works under
	// its real path.
	link := filepath.Join(base, "link")
	os.Symlink(mine, link)
	s, err = store.Open(link, store.Options{})
	if err != nil {
		t.Fatalf("open through a link: %v", err)
	}
	if s.Dir() != mine {
		t.Errorf("Dir() = %s, want the real path %s", s.Dir(), mine)
	}
	s.Close()

	// A link that another user owns in a shared (sticky) directory — as
	// in /tmp — could be pointed anywhere: refused, though it leads to
	// root's own directory; root's own link there is followed.
	shared := filepath.Join(base, "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, os.ModeSticky|0o777)
	theirLink := filepath.Join(shared, "theirs")
	os.Symlink(mine, theirLink)
	os.Lchown(theirLink, 1234, 1234)
	if _, err := store.Open(theirLink, store.Options{}); !errors.Is(err, store.ErrNotOwner) {
		t.Errorf("open through another user's link in a sticky directory: %v, want ErrNotOwner", err)
	}
	if err := store.Init(filepath.Join(theirLink, "sub"), store.DefaultChunkSize); !errors.Is(err, store.ErrNotOwner) {
		t.Errorf("init through another user's link: %v, want ErrNotOwner", err)
	}
	rootLink := filepath.Join(shared, "mine")
	os.Symlink(mine, rootLink)
	if s, err := store.Open(rootLink, store.Options{}); err != nil {
		t.Errorf("open through root's link in a sticky directory: %v", err)
	} else {
		s.Close()
	}
	// A user's plain directory in the shared one: what it holds is theirs
	// to change.
	userDir := filepath.Join(shared, "udir")
	os.Mkdir(userDir, 0o755)
	os.Chown(userDir, 1234, 1234)
	if err := store.Init(filepath.Join(userDir, "store"), store.DefaultChunkSize); !errors.Is(err, store.ErrNotOwner) {
		t.Errorf("init below another user's directory: %v, want ErrNotOwner", err)
	}
	// Dot-dot is resolved on the real path.
	if s, err := store.Open(filepath.Join(base, "sticky", "..", "mine"), store.Options{}); err != nil {
		t.Errorf("open through ..: %v", err)
	} else {
		s.Close()
	}
}
