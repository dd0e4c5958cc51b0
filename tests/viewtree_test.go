//go:build linux

package tests

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"golang.org/x/sys/unix"
)

// The /.kvfs/whole view tree against its originals, through a mount: views
// held open after their originals are made private, the owner of a block
// that root's lookup adopts, a broken view resolved once and a snapshot of
// too many tensors stored plain, and two POSIX details the view tree
// shares with the mount (the ctime of a chown that changes nothing, the
// "." and ".." of a listing). Found by the red team on issue 8's fixes.

func init() {
	// heldview DIR NAME... OPATH: with DIR as its current directory and
	// an O_PATH descriptor of OPATH (each read once, to warm the kernel's
	// caches), says "ready" and waits for a line on stdin; then reads each
	// NAME (relative to DIR) and OPATH, and reopens the descriptor through
	// /proc/self/fd. Each must fail with EACCES: the originals were made
	// unreadable meanwhile.
	clients["heldview"] = func(args []string) error {
		dir, names, opath := args[0], args[1:len(args)-1], args[len(args)-1]
		if err := os.Chdir(dir); err != nil {
			return err
		}
		for _, n := range names[:1] {
			if _, err := os.ReadFile(n); err != nil {
				return fmt.Errorf("before: %w", err)
			}
		}
		if _, err := os.ReadFile(opath); err != nil {
			return fmt.Errorf("before: %w", err)
		}
		fd, err := syscall.Open(opath, unix.O_PATH, 0)
		if err != nil {
			return fmt.Errorf("O_PATH %s: %w", opath, err)
		}
		fmt.Println("ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		var errs []error
		for _, p := range append(append([]string{}, names...), opath, fmt.Sprintf("/proc/self/fd/%d", fd)) {
			b, err := os.ReadFile(p)
			if !errors.Is(err, syscall.EACCES) {
				errs = append(errs, fmt.Errorf("read %s in %s after chmod: %q, %v; want EACCES", p, dir, b, err))
			}
		}
		return errors.Join(errs...)
	}
	// dots DIR: prints the inode numbers getdents(2) gives "." and ".."
	// of DIR, as ". INO" and ".. INO" lines.
	clients["dots"] = func(args []string) error {
		fd, err := syscall.Open(args[0], syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		buf := make([]byte, 1<<16)
		for {
			n, err := syscall.Getdents(fd, buf)
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			for b := buf[:n]; len(b) > 0; {
				ino := binary.LittleEndian.Uint64(b)
				reclen := binary.LittleEndian.Uint16(b[16:])
				name, _, _ := strings.Cut(string(b[19:reclen]), "\x00")
				if name == "." || name == ".." {
					fmt.Println(name, ino)
				}
				b = b[reclen:]
			}
		}
	}
	// manyslots PATH N: writes a blocks-layout snapshot of N empty cache
	// entries (two empty tensors each) and one real one to PATH, blocks
	// beside it.
	clients["manyslots"] = func(args []string) error {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		m := snapgen.Model{ID: "test/slots", Layers: 1, KVHeads: 1, HeadDim: 4, DType: mlx.BFloat16}
		h, tensors := m.Snapshot(snapgen.Tokens(8, 1))
		shape := []int64{1, 1, 0, 4}
		var caches []mlx.CacheEntry
		var empty []mlx.Tensor
		for i := 0; i < n; i++ {
			caches = append(caches, mlx.CacheEntry{Kind: mlx.KindKV, Offset: 8,
				Tensors: []mlx.Slot{{Shape: shape, DType: mlx.BFloat16}, {Shape: shape, DType: mlx.BFloat16}}})
			empty = append(empty, mlx.Contiguous(nil, mlx.BFloat16, shape...), mlx.Contiguous(nil, mlx.BFloat16, shape...))
		}
		h.Caches = append(caches, h.Caches...)
		_, _, err = (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 4096}).Write(args[0], h, append(empty, tensors...))
		return err
	}
}

// startHeld starts the heldview client as u and waits for it to be ready.
func startHeld(t *testing.T, u testUser, args ...string) (*exec.Cmd, *os.File, *strings.Builder) {
	t.Helper()
	cmd := u.client(t, "heldview", args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = outW, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if line != "ready\n" {
		cmd.Wait()
		t.Fatalf("heldview %v: %q %v\n%s", args, line, err, stderr.String())
	}
	return cmd, in.(*os.File), &stderr
}

// TestViewTreeHeldAfterChmod: a user who holds a directory of
// /.kvfs/whole as the current directory, and an O_PATH descriptor of a
// view file, reads nothing once root makes the originals private (chmod
// 0700 of the directory, 0600 of the file): not the files that were
// there, not one created after the chmod, not the file through its
// descriptor reopened by /proc/self/fd. The same client against the
// originals proves the expectation. (The views kept the original's old
// mode for the mount's one-hour attribute timeout, and the daemon
// checked nothing.)
func TestViewTreeHeldAfterChmod(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	for _, base := range []string{"", ".kvfs/whole/"} {
		t.Run("base="+base, func(t *testing.T) {
			sh(t, fmt.Sprintf(`cd %s && rm -rf private pub && mkdir -m 0755 private pub && chmod 0755 private pub &&
				echo SECRET > private/secret.txt && chmod 0644 private/secret.txt && echo PUB > pub/f && chmod 0644 pub/f`, m.mnt))
			cmd, in, stderr := startHeld(t, u, m.path(base+"private"), "secret.txt", "new", m.path(base+"pub/f"))
			// "new" does not exist yet: the client reads only the first
			// name before the chmod.
			sh(t, fmt.Sprintf("cd %s && chmod 0700 private && echo NEW > private/new && chmod 0644 private/new && chmod 0600 pub/f", m.mnt))
			fmt.Fprintln(in, "go")
			in.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("%v\n%s", err, stderr)
			}
		})
	}
	// A user who never held anything: the same.
	for _, p := range []string{".kvfs/whole/private/secret.txt", ".kvfs/whole/private/new", ".kvfs/whole/pub/f"} {
		if out, err := u.sh("cat " + m.path(p)); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("user's cat %s: %v %q", p, err, out)
		}
	}
	if out, err := u.sh("ls " + m.path(".kvfs/whole/private")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("user's ls of a 0700 view directory: %v %q", err, out)
	}
	// Made readable again, the views are.
	sh(t, fmt.Sprintf("chmod 0755 %s && chmod 0644 %s", m.path("private"), m.path("pub/f")))
	if out := u.shOK(t, "cat "+m.path(".kvfs/whole/private/secret.txt")+" "+m.path(".kvfs/whole/pub/f")); out != "SECRET\nPUB\n" {
		t.Errorf("after chmod back: %q", out)
	}
}

// TestRootAdoptIsOwners: root's stat of a block's hash in a user's
// blocks directory (a backup tool, an engine run as root) names the block
// there as the directory owner's, so the user's own engine can open it;
// it was root's, 0600, unreadable by the user.
func TestRootAdoptIsOwners(t *testing.T) {
	u := otherUser(t)
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	src := absFixture(t, fixtureBase)
	h := fixtureBlocks(t)[0]
	sh(t, fmt.Sprintf("mkdir -m 0755 %[1]s/u && chown %[2]d:%[3]d %[1]s/u", m.mnt, u.uid, u.gid))
	u.shOK(t, fmt.Sprintf("mkdir -p %[1]s/u/ns1/blocks %[1]s/u/ns2/blocks && cp %[2]s/blocks/%[3]s %[1]s/u/ns1/blocks/%[3]s", m.mnt, src, h))
	sh(t, "stat "+m.path("u/ns2/blocks/"+h))
	if got := statLine(t, m.path("u/ns2/blocks/"+h)); got != "600 "+u.name+" "+u.name {
		t.Errorf("block adopted by root's stat: %q, want the directory owner's", got)
	}
	u.shOK(t, fmt.Sprintf("cmp %s/blocks/%s %s", src, h, m.path("u/ns2/blocks/"+h)))
	// A user's own adoption stays the user's, and root's adoption in
	// root's own directory root's.
	sh(t, fmt.Sprintf("mkdir -p %[1]s/r/blocks && stat %[1]s/r/blocks/%[2]s", m.mnt, h))
	if got := statLine(t, m.path("r/blocks/"+h)); got != "600 root root" {
		t.Errorf("block root adopted in its own directory: %q", got)
	}
}

// TestBrokenViewRemembered: the whole view of a snapshot whose
// block is missing is resolved once, not at every stat (each read every
// block again; 142 s each for the red team's header), and the stats still
// fail with EIO.
func TestBrokenViewRemembered(t *testing.T) {
	addr := freeAddr(t)
	m := newMount(t, "--metrics", addr)
	src := absFixture(t, fixtureBase)
	missing := fixtureBlocks(t)[7]
	sh(t, fmt.Sprintf("mkdir -p %[1]s/fp/blocks && for f in %[2]s/blocks/*; do test $(basename $f) = %[3]s || cp $f %[1]s/fp/blocks/; done && cp %[2]s/%[4]s %[1]s/fp/",
		m.mnt, src, missing, fixtureManifest))
	parses := metric(t, addr, "kvfs_view_parses_total")
	for i := 0; i < 3; i++ {
		if out, err := shErr("stat " + m.path(".kvfs/whole/fp/"+fixtureManifest)); err == nil || !strings.Contains(out, "Input/output error") {
			t.Errorf("stat %d of the broken view: %v %q", i, err, out)
		}
	}
	if got := metric(t, addr, "kvfs_view_parses_total") - parses; got != 1 {
		t.Errorf("3 stats of a broken view resolved it %d times, want 1", got)
	}
}

// TestManySlotsStoredPlain: a blocks-layout snapshot of more tensors than the
// cap (65,536) is stored as a plain file, so its whole view is the file
// as it is; resolving it cost minutes per stat.
func TestManySlotsStoredPlain(t *testing.T) {
	m := newMount(t)
	if err := os.Mkdir(m.path("s"), 0o755); err != nil {
		t.Fatal(err)
	}
	runClientOK(t, "manyslots", m.path("s/many.mlxkv"), "33000") // 66,002 tensors
	runClientOK(t, "manyslots", m.path("s/few.mlxkv"), "100")
	for name, want := range map[string]string{"many.mlxkv": "plain", "few.mlxkv": "mlxkv"} {
		if got := sh(t, fmt.Sprintf("python3 -c 'import os,sys; sys.stdout.write(os.getxattr(%q, \"user.kvfs.kind\").decode())'", m.path("s/"+name))); got != want {
			t.Errorf("%s stored as %q, want %q", name, got, want)
		}
	}
	sh(t, fmt.Sprintf("cmp %s %s", m.path("s/many.mlxkv"), m.path(".kvfs/whole/s/many.mlxkv")))
	log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if !strings.Contains(string(log), "66002 tensors, over the cap of 65536") {
		t.Errorf("no log line names the tensor cap:\n%.2000s", log)
	}
}

// TestChownNoopCtime: chown(f, -1, -1) changes the ctime, of a file
// and of a directory, as in a plain directory (the kernel sends a setattr
// of no attribute; kvfs took it for a getattr).
func TestChownNoopCtime(t *testing.T) {
	m := newMount(t)
	for _, dir := range []string{t.TempDir(), m.mnt} {
		for _, name := range []string{"f", "d"} {
			p := filepath.Join(dir, name)
			if name == "d" {
				sh(t, "mkdir "+p)
			} else {
				sh(t, "echo x > "+p)
			}
			before := sh(t, "stat -c %Z.%z "+p)
			time.Sleep(20 * time.Millisecond)
			sh(t, fmt.Sprintf("python3 -c 'import os; os.chown(%q, -1, -1)'", p))
			if after := sh(t, "stat -c %Z.%z "+p); after == before {
				t.Errorf("%s: ctime %s unchanged by chown(-1, -1)", p, strings.TrimSpace(after))
			}
		}
	}
}

// TestDotEntries: a listing of a directory starts with "." and
// "..", numbered as stat numbers the directory and its parent, as in a
// plain directory; the root's ".." is the root, and the view tree's
// directories have them too.
func TestDotEntries(t *testing.T) {
	m := newMount(t)
	dots := func(dir string) map[string]uint64 {
		got := map[string]uint64{}
		for _, l := range strings.Split(strings.TrimSpace(runClientOK(t, "dots", dir)), "\n") {
			name, ino, _ := strings.Cut(l, " ")
			n, err := strconv.ParseUint(ino, 10, 64)
			if err != nil {
				t.Fatalf("dots %s: %q", dir, l)
			}
			got[name] = n
		}
		return got
	}
	ino := func(p string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	check := func(dir, parent string) {
		t.Helper()
		got := dots(dir)
		if len(got) != 2 || got["."] != ino(dir) || got[".."] != ino(parent) {
			t.Errorf("%s: dot entries %v, want . %d and .. %d", dir, got, ino(dir), ino(parent))
		}
	}
	for _, top := range []string{t.TempDir(), m.mnt} {
		sh(t, "mkdir -p "+top+"/a/b")
		check(top+"/a", top)
		check(top+"/a/b", top+"/a")
	}
	check(m.mnt, m.mnt)
	check(m.path(".kvfs"), m.mnt)
	check(m.path(".kvfs/whole/a"), m.path(".kvfs/whole"))
	check(m.path(".kvfs/whole/a/b"), m.path(".kvfs/whole/a"))
}
