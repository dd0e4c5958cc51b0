//go:build linux

package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fixture of the engine's blocks layout: 160 blocks, two manifests.
const (
	fixtureBase     = "../mlx/testdata/mlxbun/blocks/fixture-fingerprint/base"
	fixtureWhole    = "../mlx/testdata/mlxbun/whole/fixture-fingerprint/base"
	fixtureManifest = "00000000-0000-4000-8000-000000000300.mlxkv"
)

// absFixture is the fixture directory as an absolute path, for commands
// that run as another user from /.
func absFixture(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fixtureBlocks lists the fixture's block hashes.
func fixtureBlocks(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(fixtureBase, "blocks"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("fixture blocks: %v", err)
	}
	var hs []string
	for _, e := range ents {
		hs = append(hs, e.Name())
	}
	return hs
}

// shErr runs a shell command line as root in its own process and returns
// its combined output and error (the caller decides whether it must fail).
func shErr(script string) (string, error) {
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	return string(out), err
}

// statLine is stat's "%a %U %G" of path, run as root in its own process.
func statLine(t *testing.T, path string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "stat -c '%a %U %G' "+path))
}

// TestWholeViewPermissions: every entry of /.kvfs/whole carries its
// original's owner, group and mode (files without write bits), and the
// kernel checks them, for root and another user, with and without
// allow_other; /.kvfs and /.kvfs/whole are the root's owner's, 0555.
func TestWholeViewPermissions(t *testing.T) {
	u := otherUser(t)
	for _, allowOther := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow_other=%v", allowOther), func(t *testing.T) {
			var args []string
			if allowOther {
				args = []string{"-o", "allow_other"}
			}
			m := newMount(t, args...)
			m.openToOthers(t)
			sh(t, fmt.Sprintf(`mkdir -m 0700 %[1]s/private && echo root-secret > %[1]s/private/secret.txt && chmod 0600 %[1]s/private/secret.txt &&
				mkdir -m 0755 %[1]s/pub && echo public > %[1]s/pub/pub.txt && chmod 0640 %[1]s/pub/pub.txt && chgrp %[2]d %[1]s/pub/pub.txt &&
				mkdir -m 0777 %[1]s/shared && chmod 0777 %[1]s/shared`, m.mnt, u.gid))
			whole := m.path(".kvfs/whole")
			// Attributes, as root sees them.
			for path, want := range map[string]string{
				m.path(".kvfs"):               "555 root root",
				whole:                         "555 root root",
				whole + "/private":            "700 root root",
				whole + "/private/secret.txt": "400 root root",
				whole + "/pub/pub.txt":        fmt.Sprintf("440 root %s", u.name),
				whole + "/shared":             "777 root root",
				m.path(".kvfs/stats"):         "444 root root",
			} {
				if got := statLine(t, path); got != want {
					t.Errorf("%s: %q, want %q", path, got, want)
				}
			}
			// Root reads everything, as in the mount.
			if got := sh(t, "cat "+whole+"/private/secret.txt"); got != "root-secret\n" {
				t.Fatalf("root reads %q", got)
			}
			if !allowOther {
				// The kernel lets no other user in at all.
				for _, p := range []string{m.path(".kvfs"), whole + "/pub/pub.txt", whole + "/private/secret.txt"} {
					if out, err := u.sh("cat " + p); err == nil || !strings.Contains(out, "Permission denied") {
						t.Errorf("another user reads %s without allow_other: %v %q", p, err, out)
					}
				}
				return
			}
			// Another user: what the originals allow, no more.
			for _, p := range []string{whole + "/private/secret.txt", whole + "/private"} {
				if out, err := u.sh("cat " + p + "; ls " + p); err == nil || !strings.Contains(out, "Permission denied") || strings.Contains(out, "root-secret") {
					t.Errorf("another user reads %s: %v %q", p, err, out)
				}
			}
			if got := u.shOK(t, "cat "+whole+"/pub/pub.txt"); got != "public\n" {
				t.Errorf("another user reads pub.txt (group-readable) as %q", got)
			}
			// A file of the user's own, 0600: theirs to read, in both trees.
			u.shOK(t, fmt.Sprintf("echo mine > %s/shared/mine && chmod 0600 %s/shared/mine", m.mnt, m.mnt))
			if got := u.shOK(t, "cat "+whole+"/shared/mine"); got != "mine\n" {
				t.Errorf("user reads own file as %q", got)
			}
			if got := statLine(t, whole+"/shared/mine"); got != "400 "+u.name+" "+u.name {
				t.Errorf("user's file in the view: %q", got)
			}
			// The tree stays read-only for its owner.
			if out, err := u.sh("echo x > " + whole + "/shared/mine"); err == nil {
				t.Errorf("user wrote through the view: %q", out)
			}
		})
	}
}

// TestEngineBlocksAccess: a block is found by hash only where the caller
// may create it and only if the caller may read one of its files; a lookup
// the caller may not make creates nothing; an adopted block is the
// caller's. The same holds for the blocks a /.kvfs/whole view reads.
func TestEngineBlocksAccess(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	src := absFixture(t, fixtureBase)
	hs := fixtureBlocks(t)
	secret, public := hs[0], hs[1]
	// Root's snapshot, with its blocks, in a 0700 directory; one block
	// readable by all in a 0755 one; a shared 0777 directory.
	sh(t, fmt.Sprintf(`mkdir -m 0700 %[1]s/private && cp -r %[2]s %[1]s/private/fp &&
		mkdir -p %[1]s/pub/blocks && cp %[2]s/blocks/%[3]s %[1]s/pub/blocks/ && chmod 0644 %[1]s/pub/blocks/%[3]s &&
		mkdir -m 0777 %[1]s/shared && chmod 0777 %[1]s/shared && mkdir -p %[1]s/rootblocks/blocks`, m.mnt, src, public))
	u.shOK(t, fmt.Sprintf("mkdir -p %s/shared/u/blocks", m.mnt))

	// Root's block in a 0700 directory: not found through the user's own
	// blocks directory, and no entry is left there.
	ublocks := m.path("shared/u/blocks")
	if out, err := u.sh(fmt.Sprintf("cat %s/%s", ublocks, secret)); err == nil || !strings.Contains(out, "No such file") {
		t.Errorf("user read root's private block by hash: %v %.40q", err, out)
	}
	// A block the user may read: found, and the entry is the user's.
	u.shOK(t, fmt.Sprintf("cmp %s/blocks/%s %s/%s", src, public, ublocks, public))
	if got := statLine(t, ublocks+"/"+public); got != "600 "+u.name+" "+u.name {
		t.Errorf("adopted block: %q", got)
	}
	if ls := strings.Fields(sh(t, "ls "+ublocks)); len(ls) != 1 || ls[0] != public {
		t.Errorf("user's blocks directory holds %v, want only %s", ls, public)
	}
	// A mere stat in root's 0755 blocks directory creates nothing.
	rootblocks := m.path("rootblocks/blocks")
	if out, err := u.sh(fmt.Sprintf("stat %s/%s", rootblocks, public)); err == nil || !strings.Contains(out, "No such file") {
		t.Errorf("user's stat in root's blocks directory: %v %q", err, out)
	}
	if ls := strings.TrimSpace(sh(t, "ls -A "+rootblocks)); ls != "" {
		t.Errorf("a stat by a user who may not create made entries: %q", ls)
	}

	// The whole view of a manifest naming root's private blocks, in the
	// user's directory: the blocks are missing for the user (EIO), not
	// read, and not adopted.
	sh(t, fmt.Sprintf("cp %s/%s %s/shared/u/ && chown -R %d:%d %s/shared/u", src, fixtureManifest, m.mnt, u.uid, u.gid, m.mnt))
	view := m.path(".kvfs/whole/shared/u/" + fixtureManifest)
	if out, err := u.sh("cat " + view + " | wc -c"); !strings.Contains(out, "Input/output error") {
		t.Errorf("user's view of a manifest of root's blocks: %v %q", err, out)
	}
	if ls := strings.Fields(sh(t, "ls "+ublocks)); len(ls) != 1 {
		t.Errorf("the view adopted %d blocks into the user's directory", len(ls)-1)
	}
	// Root's own view of the same snapshot resolves.
	sh(t, fmt.Sprintf("cmp %s/%s %s", absFixture(t, fixtureWhole), fixtureManifest, m.path(".kvfs/whole/private/fp/"+fixtureManifest)))
	// The user's own copy of the snapshot and its blocks: the user's view
	// resolves, byte for byte.
	// (As the engine writes: a block whose name exists is skipped.)
	u.shOK(t, fmt.Sprintf(`mkdir -p %[1]s/shared/v/blocks && for f in %[2]s/blocks/*; do h=$(basename $f); test -e %[1]s/shared/v/blocks/$h || { cp $f %[1]s/shared/v/blocks/$h.tmp && mv %[1]s/shared/v/blocks/$h.tmp %[1]s/shared/v/blocks/$h; }; done &&
		cp %[2]s/%[3]s %[1]s/shared/v/ && cmp %[4]s/%[3]s %[1]s/.kvfs/whole/shared/v/%[3]s`,
		m.mnt, src, fixtureManifest, absFixture(t, fixtureWhole)))
	if got := statLine(t, m.path("shared/v/blocks/"+public)); got != "600 "+u.name+" "+u.name {
		t.Errorf("block found by the user's existence check: %q", got)
	}
}

// TestWholeViewMissingBlock: the whole view of a snapshot whose blocks are
// not all in the store is an I/O error, logged with the file and the block
// (not ENOENT: the file exists).
func TestWholeViewMissingBlock(t *testing.T) {
	m := newMount(t)
	src := absFixture(t, fixtureBase)
	missing := fixtureBlocks(t)[7]
	// The engine's blocks but one, then the manifest. (A block removed
	// after it was stored would stay: the manifest pins its content.)
	sh(t, fmt.Sprintf("mkdir -p %[1]s/fp/blocks && for f in %[2]s/blocks/*; do test $(basename $f) = %[3]s || cp $f %[1]s/fp/blocks/; done && cp %[2]s/%[4]s %[1]s/fp/",
		m.mnt, src, missing, fixtureManifest))
	view := m.path(".kvfs/whole/fp/" + fixtureManifest)
	for _, cmd := range []string{"stat ", "cat "} {
		out, err := shErr(cmd + view + " >/dev/null")
		if err == nil || !strings.Contains(out, "Input/output error") {
			t.Errorf("%s of the view: %v %q", cmd, err, out)
		}
	}
	// The file itself is there.
	sh(t, "stat "+m.path("fp/"+fixtureManifest))
	log, err := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, missing) && strings.Contains(l, fixtureManifest) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 || !strings.Contains(lines[0], "ERROR") {
		t.Errorf("no error logged naming the file and the block:\n%s", log)
	}
}

// TestEngineBlocksRaceOtherUser: the engine's collect race (see
// TestEngineBlocksRace) run by an ordinary user on an allow_other mount:
// the blocks a collect deleted before the manifest landed are the user's
// to find again, through the user's blocks directory and the whole view,
// and not another user's (root's directory here, which the user may not
// write).
func TestEngineBlocksRaceOtherUser(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	src := absFixture(t, fixtureBase)
	sh(t, fmt.Sprintf("mkdir -m 0777 %[1]s/shared && chmod 0777 %[1]s/shared && mkdir -p %[1]s/rootblocks/blocks", m.mnt))
	ns := m.path("shared/fp")
	u.shOK(t, fmt.Sprintf(`mkdir -p %[2]s/blocks && for f in %[1]s/blocks/*; do h=$(basename $f); cp $f %[2]s/blocks/$h.tmp && chmod 0600 %[2]s/blocks/$h.tmp && mv %[2]s/blocks/$h.tmp %[2]s/blocks/$h; done &&
		cp %[1]s/%[3]s %[2]s/%[3]s.tmp && rm %[2]s/blocks/* && mv %[2]s/%[3]s.tmp %[2]s/%[3]s`, src, ns, fixtureManifest))
	if ls := strings.TrimSpace(u.shOK(t, "ls "+ns+"/blocks")); ls != "" {
		t.Fatalf("the collect left blocks: %q", ls)
	}
	u.shOK(t, fmt.Sprintf("cmp %s/%s %s/.kvfs/whole/shared/fp/%s", absFixture(t, fixtureWhole), fixtureManifest, m.mnt, fixtureManifest))
	h := fixtureBlocks(t)[0]
	u.shOK(t, fmt.Sprintf("cmp %s/blocks/%s %s/blocks/%s", src, h, ns, h))
	if out, err := u.sh(fmt.Sprintf("stat %s/%s", m.path("rootblocks/blocks"), h)); err == nil {
		t.Errorf("user's stat in root's blocks directory: %q", out)
	}
	if ls := strings.TrimSpace(sh(t, "ls -A "+m.path("rootblocks/blocks"))); ls != "" {
		t.Errorf("entries made in root's blocks directory: %q", ls)
	}
}
