//go:build linux

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Who reaches what through the view tree and adopted blocks: root's lookup
// adopts a block for a directory's owner only if the owner may read it, a
// held view directory keeps working after a rename above it, and the view
// tree's entries are read-only (EROFS). Found by the second red-team round
// on issue 8.

// TestRootAdoptsOnlyWhatOwnerMayRead: root's lookup of a block in a
// user's blocks directory (a backup tool's stat, a find through the whole
// view of the user's snapshot) adopts it for the directory's owner only if
// that owner could read it: a block of root's in a 0700 directory stays
// out of the user's reach.
func TestRootAdoptsOnlyWhatOwnerMayRead(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	src := absFixture(t, fixtureBase)
	h := fixtureBlocks(t)[0]
	sh(t, fmt.Sprintf("mkdir -m 0700 %[1]s/priv && mkdir %[1]s/priv/blocks && cp %[2]s/blocks/%[3]s %[1]s/priv/blocks/", m.mnt, src, h))
	sh(t, fmt.Sprintf("mkdir -m 0755 %[1]s/u && chown %[2]d:%[3]d %[1]s/u", m.mnt, u.uid, u.gid))
	u.shOK(t, fmt.Sprintf("mkdir -p %s/u/ns/blocks && cp %s/%s %s/u/ns/", m.mnt, src, fixtureManifest, m.mnt))
	// Root looks: by stat, and through the user's snapshot's whole view.
	shErr("stat " + m.path("u/ns/blocks/"+h))
	shErr("find " + m.path(".kvfs/whole/u/ns") + " -type f -exec cat {} + > /dev/null")
	if out, err := u.sh("cat " + m.path("u/ns/blocks/"+h)); err == nil {
		t.Fatalf("%s read root's private block after root looked it up in their directory:\n%.200s", u.name, out)
	}
	if _, err := os.Lstat(m.path("u/ns/blocks/" + h)); err == nil {
		t.Fatalf("root's lookup named root's private block in %s's directory", u.name)
	}
}

// TestViewTreeHeldDeepAndRenamed: the view tree checks each directory
// at its own place (constant time, not the depth), so a view directory
// held open keeps working after a directory above it is renamed, as on a
// local disk; a deep tree's view is walked at the plain tree's pace (its
// cost grew with the depth cubed); a chmod of the held directory itself
// still shuts the other user out.
func TestViewTreeHeldDeepAndRenamed(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	deep := "top" + strings.Repeat("/d", 150)
	sh(t, fmt.Sprintf("mkdir -p %s && echo deep > %s/f && chmod -R a+rX %s", m.path(deep), m.path(deep), m.path("top")))
	for _, dir := range []string{t.TempDir(), m.mnt} {
		view := dir
		if dir == m.mnt {
			view = m.path(".kvfs/whole")
		} else {
			sh(t, fmt.Sprintf("chmod 755 %[1]s && mkdir -p %[1]s/%[2]s && echo deep > %[1]s/%[2]s/f && chmod -R a+rX %[1]s/top", dir, deep))
		}
		if got := u.shOK(t, "cat "+filepath.Join(view, deep, "f")); got != "deep\n" {
			t.Fatalf("%s: deep read %q", dir, got)
		}
		// Held: cd into top/d/d, rename top, read relative to the cwd.
		script := fmt.Sprintf("cd %s/top/d/d && touch /tmp/kvfs-held-%[2]s-ready; while [ ! -e /tmp/kvfs-held-%[2]s-go ]; do sleep 0.05; done; cat %[3]s/f",
			view, filepath.Base(dir), strings.Repeat("d/", 148))
		os.Remove("/tmp/kvfs-held-" + filepath.Base(dir) + "-ready")
		os.Remove("/tmp/kvfs-held-" + filepath.Base(dir) + "-go")
		done := make(chan string, 1)
		go func() { out, err := u.sh(script); done <- fmt.Sprint(out, err) }()
		for i := 0; i < 200; i++ {
			if _, err := os.Stat("/tmp/kvfs-held-" + filepath.Base(dir) + "-ready"); err == nil {
				break
			}
			sh(t, "sleep 0.05")
		}
		sh(t, fmt.Sprintf("mv %[1]s/top %[1]s/moved && touch /tmp/kvfs-held-%[2]s-go", dir, filepath.Base(dir)))
		if got := <-done; got != "deep\n<nil>" {
			t.Errorf("%s: read in a held directory after a directory above it was renamed: %q", dir, got)
		}
		os.Remove("/tmp/kvfs-held-" + filepath.Base(dir) + "-ready")
		os.Remove("/tmp/kvfs-held-" + filepath.Base(dir) + "-go")
		sh(t, fmt.Sprintf("mv %[1]s/moved %[1]s/top", dir))
	}
}

// TestViewTreeReadOnly: chmod, chown and truncate of the view tree's
// entries are EROFS, as on a read-only mount (they were ENOTSUP).
func TestViewTreeReadOnly(t *testing.T) {
	m := newMount(t)
	sh(t, fmt.Sprintf("mkdir %[1]s/d && echo x > %[1]s/d/f", m.mnt))
	for _, cmd := range []string{"chmod 600 %s/.kvfs/whole/d/f", "chown 1:1 %s/.kvfs/whole/d", "chmod 700 %s/.kvfs", "truncate -s 0 %s/.kvfs/whole/d/f"} {
		out, err := shErr(fmt.Sprintf(cmd, m.mnt))
		if err == nil || !strings.Contains(out, "Read-only file system") {
			t.Errorf("%s: %v %q, want EROFS", fmt.Sprintf(cmd, "MNT"), err, out)
		}
	}
}
