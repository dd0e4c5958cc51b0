//go:build linux

package tests

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestPoolMountNewFileHere: a new file being written through a pool mount,
// before its first publish, behaves here as on a disk: other processes
// here stat and read the bytes written so far, it can be renamed (over a
// published name, which goes at once) and unlinked while open; other
// hosts see it only when published, under the name it has by then, and
// the name it was created under never reaches the pool.
func TestPoolMountNewFileHere(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	old := psVersion(7, 3<<20+5)
	engineWrite(t, filepath.Join(a, "final"), old, 1)
	waitFor(t, "final through B", func() error { return sameBytes(filepath.Join(b, "final"), old, 2) })

	part1, part2 := psVersion(8, 1<<20+1234), psVersion(9, 2<<20+77)
	whole := append(append([]byte{}, part1...), part2...)
	tmp := filepath.Join(a, "final.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(part1); err != nil {
		t.Fatal(err)
	}
	// Here, before any publish: stat and read (cat, another process)
	// give what was written so far, at unaligned offsets too.
	if fi, err := os.Stat(tmp); err != nil || fi.Size() != int64(len(part1)) {
		t.Fatalf("stat of the unpublished %s: %v, %v; want %d bytes", tmp, fi, err, len(part1))
	}
	if err := sameBytes(tmp, part1, 3); err != nil {
		t.Fatalf("read of the unpublished file here: %v", err)
	}
	// Not on B.
	if _, err := os.Stat(filepath.Join(b, "final.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B sees the unpublished file: %v", err)
	}
	// Renamed over a published name while open and unpublished.
	if err := os.Rename(tmp, filepath.Join(a, "final")); err != nil {
		t.Fatalf("rename of the unpublished file over final: %v", err)
	}
	if err := sameBytes(filepath.Join(a, "final"), part1, 4); err != nil {
		t.Fatalf("final here after the rename: %v", err)
	}
	if _, err := f.Write(part2); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close (publish): %v", err)
	}
	waitFor(t, "final through B after the publish", func() error { return sameBytes(filepath.Join(b, "final"), whole, 5) })
	if err := sameBytes(filepath.Join(a, "final"), whole, 6); err != nil {
		t.Fatal(err)
	}
	names := poolNames(t, env)
	if names["final.tmp"] || !names["final"] {
		t.Fatalf("pool names %v: want final and no final.tmp", names)
	}

	// Unlinked while open and unpublished: never published.
	gone := filepath.Join(a, "gone")
	g, err := os.Create(gone)
	if err != nil {
		t.Fatal(err)
	}
	g.Write(part1)
	if err := os.Remove(gone); err != nil {
		t.Fatalf("unlink of the unpublished open file: %v", err)
	}
	if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	g.Write(part2)
	if err := g.Close(); err != nil {
		t.Fatalf("close of the unlinked file: %v", err)
	}
	if names := poolNames(t, env); names["gone"] {
		t.Fatal("an unlinked file was published at its close")
	}

	// A shell's redirection opens the file, moves the descriptor and
	// closes the first one (a flush) before a byte is written: other
	// hosts must not see the file empty meanwhile.
	done := make(chan error, 1)
	go func() {
		done <- exec.Command("sh", "-c", "{ sleep 1.5; printf content; } > "+filepath.Join(a, "redirected")).Run()
	}()
	seen := ""
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline) && seen != "content"; time.Sleep(50 * time.Millisecond) {
		got, err := os.ReadFile(filepath.Join(b, "redirected"))
		if err == nil {
			if seen = string(got); seen != "content" {
				t.Fatalf("B read %q of a file being written by a redirection", seen)
			}
		}
	}
	if err := <-done; err != nil || seen != "content" {
		t.Fatalf("redirection: %v; B saw %q", err, seen)
	}
}

// TestPoolMountPublishRacesRename: a file's publish (at its close) racing a
// rename of the same file through the same mount commits under one name
// or the other, never the old name after the rename: the pool must end
// with every file under its new name, whole, and no old name left.
func TestPoolMountPublishRacesRename(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	const n = 40
	for i := range n {
		tmp, final := filepath.Join(a, fmt.Sprintf("r%d.tmp", i)), filepath.Join(a, fmt.Sprintf("r%d", i))
		first, second := psVersion(uint64(100+i), 600_000), psVersion(uint64(200+i), 900_001)
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(first); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := f.Sync(); err != nil { // published: the rename moves a pool name
				t.Fatal(err)
			}
		}
		if _, err := f.WriteAt(second, 0); err != nil {
			t.Fatal(err)
		}
		// The close publishes (FLUSH); the kernel holds no lock of the
		// file across it, as it does across an fsync, so the rename can
		// run in the middle of the publish.
		var wg sync.WaitGroup
		var closeErr, renameErr error
		wg.Add(2)
		go func() { defer wg.Done(); closeErr = f.Close() }()
		go func() { defer wg.Done(); renameErr = os.Rename(tmp, final) }()
		wg.Wait()
		if closeErr != nil || renameErr != nil {
			t.Fatalf("file %d: close %v, rename %v", i, closeErr, renameErr)
		}
	}
	names := poolNames(t, env)
	b := poolMount(t, env, "b")
	for i := range n {
		want := psVersion(uint64(200+i), 900_001)
		if names[fmt.Sprintf("r%d.tmp", i)] {
			t.Errorf("r%d.tmp is in the pool after its rename", i)
		}
		if err := sameBytes(filepath.Join(b, fmt.Sprintf("r%d", i)), want, uint64(i)); err != nil {
			t.Errorf("r%d through B: %v", i, err)
		}
	}
}

// poolNames lists the pool's names with kvfs pool ls.
func poolNames(t *testing.T, env []string) map[string]bool {
	t.Helper()
	code, out, errOut := poolKvfs(t, env, "pool", "ls")
	if code != 0 {
		t.Fatalf("kvfs pool ls: exit %d: %s", code, errOut)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			names[l] = true
		}
	}
	return names
}

// TestPoolMountSplitTruncate: on a mount without atomic O_TRUNC (macOS;
// --simulate-darwin makes Linux's kernel do as macFUSE does: an open for
// writing without O_TRUNC, then a truncation to 0 through the new
// handle), replacing a published file with open(O_TRUNC) works, and no
// host ever sees it empty or partial meanwhile; a write in place is
// still refused, at the write; truncate(2) to 0 publishes an empty file.
func TestPoolMountSplitTruncate(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a", "--simulate-darwin")
	b := poolMount(t, env, "b")
	v1, v2 := psVersion(1, 2<<20+3), psVersion(2, 1<<20+999)
	f, fb := filepath.Join(a, "f"), filepath.Join(b, "f")
	engineWrite(t, f, v1, 1)
	waitFor(t, "f through B", func() error { return sameBytes(fb, v1, 2) })

	// B watches f while A replaces it twice: every read is one whole
	// version.
	stop := readLoop(fb, psCheck)
	if err := os.WriteFile(f, v2, 0o644); err != nil {
		t.Fatalf("open(O_TRUNC) and write without atomic O_TRUNC: %v", err)
	}
	if err := sameBytes(f, v2, 3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replacement through B", func() error { return sameBytes(fb, v2, 4) })
	if err := os.WriteFile(f, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second replacement through B", func() error { return sameBytes(fb, v1, 5) })
	reads, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d whole reads through B during the replacements", reads)

	// A write in place: the open succeeds (it may be the first half of
	// an open(O_TRUNC)); the write is refused and nothing changes.
	w, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := w.Stat(); err != nil || fi.Size() != int64(len(v1)) {
		t.Fatalf("fstat of a file opened without O_TRUNC: %v, %v", fi, err)
	}
	if _, err := w.WriteAt([]byte("x"), 10); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("write in place: %v, want EOPNOTSUPP", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("open for append: %v, want EOPNOTSUPP", err)
	}
	if err := sameBytes(fb, v1, 6); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, 0); err != nil {
		t.Fatalf("truncate(2): %v", err)
	}
	waitFor(t, "the truncation through B", func() error {
		if fi, err := os.Stat(fb); err != nil || fi.Size() != 0 {
			return fmt.Errorf("stat %s: %v, %v; want empty", fb, fi, err)
		}
		return nil
	})
}

// TestPoolMountOtherUser: an ordinary user beside root on root's pool
// mount (-o allow_other) reads what the pool holds, byte-identical and at
// unaligned offsets, but changes nothing: every file and directory is
// root's, and the kernel's permission checks (default_permissions) refuse
// the user's create, write, truncate, rename, unlink and mkdir, leaving
// the pool as it was.
func TestPoolMountOtherUser(t *testing.T) {
	u := otherUser(t)
	env, _ := poolServices(t)
	a := poolMount(t, env, "a", "-o", "allow_other")
	for d := filepath.Dir(a); d != "/" && strings.HasPrefix(d, os.TempDir()) && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v := psVersion(3, 3<<20+11)
	if err := os.MkdirAll(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(a, "d", "f")
	engineWrite(t, f, v, 1)
	want := fmt.Sprintf("%x", sha256.Sum256(v))
	out := u.shOK(t, fmt.Sprintf("sha256sum < %s && dd if=%s bs=4096 skip=1000001 count=70001 iflag=skip_bytes,count_bytes status=none | sha256sum", f, f))
	if lines := strings.Fields(out); len(lines) < 3 || lines[0] != want || lines[2] != fmt.Sprintf("%x", sha256.Sum256(v[1000001:1000001+70001])) {
		t.Fatalf("the user's reads: %q, want %s and the range's hash", out, want)
	}
	for _, script := range []string{
		"echo x > " + filepath.Join(a, "d", "new"),
		"echo x > " + f,
		"echo x >> " + f,
		"truncate -s 0 " + f,
		"mv " + f + " " + filepath.Join(a, "d", "moved"),
		"rm -f " + f,
		"mkdir " + filepath.Join(a, "d", "sub"),
		"echo x > " + filepath.Join(a, "top"),
	} {
		if out, err := u.sh(script); err == nil || !strings.Contains(out, "denied") {
			t.Errorf("as %s: %s: %v %q, want permission denied", u.name, script, err, out)
		}
	}
	names := poolNames(t, env)
	if len(names) != 1 || !names["d/f"] {
		t.Fatalf("pool names after the user's attempts: %v, want only d/f", names)
	}
	if err := sameBytes(f, v, 2); err != nil {
		t.Fatal(err)
	}
}

// TestPoolMountReadsAcrossRepack: a collection that rewrites the pack of
// a file nobody changes (its name moves to a copy of its manifest, and
// the old manifest and pack are deleted in the same round) must not fail
// an open of it on another host, whose kernel entry still leads to the
// old version for up to a second (red team 23: ENOENT). The open is told
// ESTALE and the kernel looks the name up again.
func TestPoolMountReadsAcrossRepack(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	opens := 0
	for round := range 3 {
		// keep is the first 3 MiB of big, so its chunks lie in big's
		// pack: removing big makes that pack sparse, and the collection
		// rewrites it and moves keep.
		big := psVersion(uint64(20+round), 20<<20+1)
		keep := big[:3<<20]
		bigName, keepName := fmt.Sprintf("big%d", round), fmt.Sprintf("keep%d", round)
		engineWrite(t, filepath.Join(a, bigName), big, 1)
		engineWrite(t, filepath.Join(a, keepName), keep, 2)
		waitFor(t, "keep through B", func() error { return sameBytes(filepath.Join(b, keepName), keep, 3) })
		if err := os.Remove(filepath.Join(a, bigName)); err != nil {
			t.Fatal(err)
		}
		stop := readLoop(filepath.Join(b, keepName), func(got []byte) error {
			if !bytes.Equal(got, keep) {
				return fmt.Errorf("%d bytes, not the %d written", len(got), len(keep))
			}
			return nil
		})
		code, out, errOut := poolKvfs(t, env, "gc", "--pool", envValue(env, "KVFS_POOL"), "--grace", "1ms", "--threshold", "0.3")
		time.Sleep(1500 * time.Millisecond) // past B's entry timeout
		n, err := stop()
		opens += n
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if code != 0 || !strings.Contains(out, "1 sparse packs") {
			t.Fatalf("kvfs gc: exit %d, want one pack rewritten\n%s%s", code, out, errOut)
		}
	}
	t.Logf("%d opens through B during 3 collections that moved the file, none failed", opens)
}

// readLoop reads path whole in a loop, checking each read with check,
// until the stop it returns is called; stop reports how many reads were
// made and the first that failed.
func readLoop(path string, check func([]byte) error) (stop func() (int, error)) {
	done := make(chan struct{})
	var n int
	var first error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err == nil {
				err = check(got)
			}
			n++
			if err != nil && first == nil {
				first = fmt.Errorf("read %d of %s: %w", n, path, err)
			}
		}
	}()
	return func() (int, error) {
		close(done)
		wg.Wait()
		return n, first
	}
}

// TestPoolMountEtcdOutage: with etcd stopped, files a host has read stay
// readable through its mount by name (open, stat, ls: the last listing
// and versions it saw), whole and at unaligned offsets, without one
// timeout per lookup; a write fails in bounded time with an error; when
// etcd is back the mount serves changes again without a restart.
func TestPoolMountEtcdOutage(t *testing.T) {
	env, svc := poolServices(t)
	services := func(args ...string) {
		t.Helper()
		script, _ := filepath.Abs("../scripts/services")
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "KVFS_SERVICES_DIR="+svc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/services %v: %v\n%s", args, err, out)
		}
	}
	a := poolMount(t, env, "a", "--pool-timeout", "3s")
	b := poolMount(t, env, "b", "--pool-timeout", "3s")
	v := psVersion(5, 5<<20+77)
	engineWrite(t, filepath.Join(a, "f"), v, 1)
	waitFor(t, "f through B", func() error { return sameBytes(filepath.Join(b, "f"), v, 2) })

	services("stop", "etcd")
	time.Sleep(1200 * time.Millisecond) // past the mount's entry timeout and listing
	start := time.Now()
	reads := 0
	for time.Since(start) < 8*time.Second {
		if err := sameBytes(filepath.Join(b, "f"), v, uint64(reads)); err != nil {
			t.Fatalf("read %d of a cached file by name, etcd down: %v", reads, err)
		}
		if ents, err := os.ReadDir(b); err != nil || len(ents) != 1 {
			t.Fatalf("ls with etcd down: %v, %v", ents, err)
		}
		reads++
	}
	// One lookup may wait for the pool timeout (3 s) before the mount
	// knows etcd is down; after that, reads go at the cache's speed.
	if reads < 10 {
		t.Fatalf("%d reads in 8 s with etcd down: lookups wait for etcd", reads)
	}
	t0 := time.Now()
	err := os.WriteFile(filepath.Join(a, "g"), v[:1000], 0o644)
	if err == nil {
		t.Fatal("a write with etcd down succeeded")
	}
	if d := time.Since(t0); d > 40*time.Second {
		t.Fatalf("a write with etcd down failed after %v", d)
	}
	services("start")
	v2 := psVersion(6, 1<<20+3)
	waitFor(t, "a write after etcd is back", func() error { return os.WriteFile(filepath.Join(a, "h"), v2, 0o644) })
	waitFor(t, "the new file through B", func() error { return sameBytes(filepath.Join(b, "h"), v2, 3) })
	t.Logf("%d reads by name during the outage", reads)
}

// TestPoolMountExclClaim: a file created with O_EXCL and not yet
// published holds its name against exclusive creates on other hosts, and
// gives it up when it is unlinked (or renamed, published, closed).
func TestPoolMountExclClaim(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	excl := func(p string) (*os.File, error) { return os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644) }
	fa, err := excl(filepath.Join(a, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if _, err := excl(filepath.Join(b, "x")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL create on B of a name A is creating: %v, want EEXIST", err)
	}
	if err := os.Remove(filepath.Join(a, "x")); err != nil {
		t.Fatal(err)
	}
	fb, err := excl(filepath.Join(b, "x"))
	if err != nil {
		t.Fatalf("O_EXCL create on B after A's unlink: %v", err)
	}
	fb.Write([]byte("b's"))
	fa.Write([]byte("a's"))
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B's x through A", func() error {
		got, err := os.ReadFile(filepath.Join(a, "x"))
		if err == nil && string(got) != "b's" {
			err = fmt.Errorf("x is %q", got)
		}
		return err
	})
	if _, err := excl(filepath.Join(a, "x")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL create of a published name: %v, want EEXIST", err)
	}
}
