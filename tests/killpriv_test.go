//go:build linux

package tests

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
)

// Kill-priv (issue 9): a write, truncate or chown clears a file's set-ID
// bits, by the kernel's rules. kvfs negotiates FUSE_HANDLE_KILLPRIV_V2, so
// that the kernel stops asking for security.capability before every
// write(2), and clears the bits itself. These tests hold kvfs to what the
// kernel does on a plain directory of the same machine, in the same run.

func init() {
	// killpriv OP FILE...: apply OP to each FILE, as the calling user.
	// write: open for writing, two writes, close; ftruncate: open for
	// writing, ftruncate to 4 bytes, close; otrunc: open with O_TRUNC,
	// close; writechmodwrite: open for writing, write, fchmod 06755, write,
	// close; truncate: truncate(2) the path to 4 bytes; chownnoop:
	// chown(FILE, -1, -1); chgrpself: chown(FILE, -1, the caller's gid);
	// chownother: chown(FILE, the other test user's uid, -1).
	clients["killpriv"] = func(args []string) error {
		op := args[0]
		for _, p := range args[1:] {
			if err := killprivOp(op, p); err != nil {
				return fmt.Errorf("%s %s: %w", op, p, err)
			}
		}
		return nil
	}
	// writes FILE N SIZE: open FILE for writing (creating it), write SIZE
	// bytes N times, close.
	clients["writes"] = func(args []string) error {
		n, _ := strconv.Atoi(args[1])
		size, _ := strconv.Atoi(args[2])
		f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		buf := make([]byte, size)
		for i := 0; i < n; i++ {
			buf[0] = byte(i)
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return err
			}
		}
		return f.Close()
	}
}

func killprivOp(op, p string) error {
	switch op {
	case "write", "ftruncate", "otrunc", "writechmodwrite":
		flags := os.O_WRONLY
		if op == "otrunc" {
			flags |= os.O_TRUNC
		}
		f, err := os.OpenFile(p, flags, 0)
		if err != nil {
			return err
		}
		switch op {
		case "write":
			if _, err = f.WriteAt([]byte("kill"), 0); err == nil {
				_, err = f.WriteAt([]byte("priv"), 4)
			}
		case "ftruncate":
			err = f.Truncate(4)
		case "writechmodwrite":
			// The bits come back while the file has writes
			// pending, and the next write clears them again.
			if _, err = f.WriteAt([]byte("kill"), 0); err == nil {
				if err = f.Chmod(os.ModeSetuid | os.ModeSetgid | 0o755); err == nil {
					_, err = f.WriteAt([]byte("priv"), 4)
				}
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case "truncate":
		return os.Truncate(p, 4)
	case "chownnoop":
		return os.Chown(p, -1, -1)
	case "chgrpself":
		return os.Chown(p, -1, os.Getgid())
	case "chownother":
		o, err := user.Lookup(otherUserName)
		if err != nil {
			return err
		}
		uid, err := strconv.Atoi(o.Uid)
		if err != nil {
			return err
		}
		return os.Chown(p, uid, -1)
	}
	return fmt.Errorf("unknown op %q", op)
}

// TestKillPrivMatchesPlainDir: each case sets up a file with set-ID bits
// on kvfs and in a plain directory alike, applies one operation to both
// from a separate process as the given user, and compares the modes that
// stat shows afterwards. The plain directory is the reference (the
// kernel's rules: a caller without CAP_FSETID loses set-user-ID, and
// set-group-ID when the group may execute; root keeps both at a write or
// truncate; chown clears set-user-ID even for root); the expected mode is
// there to show that each case exercises what it says. It passes with and
// without --no-killpriv: before kvfs handled kill-priv the kernel did it.
func TestKillPrivMatchesPlainDir(t *testing.T) {
	for _, args := range [][]string{nil, {"--no-killpriv"}} {
		t.Run(fmt.Sprint("args=", args), func(t *testing.T) { testKillPriv(t, args) })
	}
}

func testKillPriv(t *testing.T, args []string) {
	u := otherUser(t)
	m := newMount(t, append([]string{"-o", "allow_other"}, args...)...)
	m.openToOthers(t)
	plain := filepath.Join(filepath.Dir(m.mnt), "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{m.mnt, plain} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	const root = "root"
	cases := []struct {
		name  string
		owner string // the file's owner: root or the other user
		mode  uint32
		by    string // who applies op
		op    string
		want  uint32
	}{
		{"owner writes", u.name, 0o6755, u.name, "write", 0o755},
		{"owner writes, sgid without group exec", u.name, 0o2644, u.name, "write", 0o2644},
		{"owner writes, suid and sgid without group exec", u.name, 0o6744, u.name, "write", 0o2744},
		{"other writes root's file", root, 0o6777, u.name, "write", 0o777},
		{"owner writes, sets the bits again, writes", u.name, 0o755, u.name, "writechmodwrite", 0o755},
		{"owner ftruncates", u.name, 0o6755, u.name, "ftruncate", 0o755},
		{"owner opens with O_TRUNC", u.name, 0o6755, u.name, "otrunc", 0o755},
		{"owner truncates the path", u.name, 0o6755, u.name, "truncate", 0o755},
		{"owner chowns to -1 -1", u.name, 0o6755, u.name, "chownnoop", 0o755},
		{"root writes", u.name, 0o6755, root, "write", 0o6755},
		{"root ftruncates", u.name, 0o6755, root, "ftruncate", 0o6755},
		{"root opens with O_TRUNC", u.name, 0o6755, root, "otrunc", 0o6755},
		{"root chowns to -1 -1", u.name, 0o6755, root, "chownnoop", 0o755},
		{"owner chgrps to its own group", u.name, 0o6755, u.name, "chgrpself", 0o755},
		{"owner chgrps, sgid without group exec", u.name, 0o6744, u.name, "chgrpself", 0o2744},
		{"root chowns its file to the other user", root, 0o6755, root, "chownother", 0o755},
		{"root chowns, sgid without group exec", root, 0o6744, root, "chownother", 0o2744},
		// chown(-1, -1) by one who neither owns nor may write the file:
		// EPERM where it would clear a bit (the kernel passes it on
		// unchecked), as on a disk.
		{"other chowns root's file to -1 -1", root, 0o4755, u.name, "chownnoop", 0o4755},
		{"other chowns root's file to -1 -1, sgid", root, 0o2755, u.name, "chownnoop", 0o2755},
		// A writer outside the file's group loses set-group-ID even
		// without group execute (with kill-priv: without it, the
		// kernel's own check through FUSE misses this rule).
		{"other writes root's file, sgid without group exec, not in its group", root, 0o2767, u.name, "write", 0o767},
	}
	killprivOnly := map[string]bool{"other writes root's file, sgid without group exec, not in its group": true}
	for i, c := range cases {
		if killprivOnly[c.name] && len(args) > 0 {
			continue
		}
		var paths []string
		for _, d := range []string{m.mnt, plain} {
			p := filepath.Join(d, fmt.Sprintf("f%d", i))
			setIDFile(t, p, c.owner, u, c.mode)
			paths = append(paths, p)
		}
		// One client per file: the operation may fail (EPERM) on
		// both alike.
		var errs [2]error
		var outs [2][]byte
		for k, p := range paths {
			cmd := client("killpriv", c.op, p)
			if c.by != root {
				cmd = u.client(t, "killpriv", c.op, p)
			}
			outs[k], errs[k] = cmd.CombinedOutput()
		}
		if (errs[0] == nil) != (errs[1] == nil) {
			t.Errorf("%s: kvfs: %v %s; a plain directory: %v %s", c.name, errs[0], outs[0], errs[1], outs[1])
		}
		got, ref := permBits(t, paths[0]), permBits(t, paths[1])
		if got != ref {
			t.Errorf("%s: kvfs shows mode %04o, a plain directory %04o", c.name, got, ref)
		}
		if ref != c.want {
			t.Errorf("%s: the plain directory shows mode %04o, the test expects %04o", c.name, ref, c.want)
		}
	}
	// What stat showed is what is stored: a fresh mount agrees.
	kvfs(t, "unmount", m.mnt)
	m.start(t, args...)
	for i, c := range cases {
		if killprivOnly[c.name] && len(args) > 0 {
			continue
		}
		if got := permBits(t, filepath.Join(m.mnt, fmt.Sprintf("f%d", i))); got != c.want {
			t.Errorf("%s: after remount kvfs shows mode %04o, want %04o", c.name, got, c.want)
		}
	}
}

// setIDFile makes p a 10-byte file owned by owner (root or u) with mode
// (set-ID bits included), set after the chown, which would clear them.
func setIDFile(t *testing.T, p, owner string, u testUser, mode uint32) {
	t.Helper()
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if owner != "root" {
		if err := os.Chown(p, int(u.uid), int(u.gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if got := permBits(t, p); got != mode {
		t.Fatalf("%s: mode %04o after chmod %04o", p, got, mode)
	}
}

// permBits is the permission and set-ID bits of p, as stat(2) shows them.
func permBits(t *testing.T, p string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

// TestKillPrivNoCapabilityXattr: the kill-priv rule also drops a file's
// security.capability at a write; kvfs has nothing to drop, because it
// stores no security.* attribute. Should that change, the daemon must
// drop the capability where it clears set-ID bits (fileNode.killPrivs),
// and this test fails to say so.
func TestKillPrivNoCapabilityXattr(t *testing.T) {
	m := newMount(t)
	p := m.path("cap")
	if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A VFS_CAP_REVISION_2 blob granting cap_net_raw (permitted,
	// effective), as setcap cap_net_raw+ep writes it.
	capV2 := []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	err := syscall.Setxattr(p, "security.capability", capV2, 0)
	if !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("setxattr security.capability on kvfs: %v, want EOPNOTSUPP (kvfs would then have to drop it at writes)", err)
	}
	if _, err := syscall.Getxattr(p, "security.capability", nil); !errors.Is(err, syscall.ENODATA) {
		t.Fatalf("getxattr security.capability on kvfs: %v, want ENODATA", err)
	}
}

// fuseRequest matches go-fuse's --debug-fuse line for a request: its
// opcode, and for GETXATTR the attribute's name (quoted, and the quotes
// escaped by the log's own quoting).
var fuseRequest = regexp.MustCompile(`rx \d+: ([A-Z_]+) n\d+ (?:\{sz \d+\} \\?"([^"\\]*))?`)

// countRequests counts the FUSE requests that the daemon logged (with
// --debug-fuse) from byte offset from of its log on, by opcode; GETXATTR
// counts only security.capability.
func countRequests(t *testing.T, m *mount, from int64) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, sub := range fuseRequest.FindAllStringSubmatch(string(b[from:]), -1) {
		if sub[1] != "GETXATTR" || sub[2] == "security.capability" {
			n[sub[1]]++
		}
	}
	return n
}

func logSize(t *testing.T, m *mount) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(m.store, "kvfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestKillPrivNoGetxattrPerWrite: N write(2) calls into one open file
// cost N WRITE requests (one, with -o writeback_cache) and no
// security.capability lookup each: the
// kernel asks once per inode (and again after the inode's attributes are
// refreshed), not per write, as it did before kvfs negotiated
// FUSE_HANDLE_KILLPRIV_V2 (with --no-killpriv it asks N times; the test
// checks that too, so that it shows what it measures). Both as root and
// as another user, whose writes carry FUSE_WRITE_KILL_SUIDGID.
func TestKillPrivNoGetxattrPerWrite(t *testing.T) {
	const n = 32
	u := otherUser(t)
	for _, c := range []struct {
		args []string
		max  int // security.capability lookups allowed for n writes
	}{{nil, 1}, {[]string{"--no-killpriv"}, n}} {
		t.Run(fmt.Sprint("args=", c.args), func(t *testing.T) {
			m := newMount(t, append([]string{"-o", "allow_other", "--debug-fuse", "--log-level", "debug"}, c.args...)...)
			m.openToOthers(t)
			if err := os.Chmod(m.mnt, 0o777); err != nil {
				t.Fatal(err)
			}
			for _, who := range []string{"root", u.name} {
				p := m.path("writes-" + who)
				cmd := client("writes", p, strconv.Itoa(n), "4096")
				if who != "root" {
					cmd = u.client(t, "writes", p, strconv.Itoa(n), "4096")
				}
				from := logSize(t, m)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("as %s: client: %v\n%s", who, err, out)
				}
				reqs := countRequests(t, m, from)
				t.Logf("as %s, %d writes of 4 KiB: requests %v", who, n, reqs)
				if reqs["CREATE"] != 1 || reqs["WRITE"] == 0 {
					t.Fatalf("as %s: the daemon's log shows %d CREATE and %d WRITE requests for the client's create and %d writes: the count is off", who, reqs["CREATE"], reqs["WRITE"], n)
				}
				if got := reqs["GETXATTR"]; c.max < n && got > c.max || c.max == n && got < n {
					t.Errorf("as %s: %d security.capability lookups for %d writes, want %s %d", who, got, n, map[bool]string{true: "at most", false: "at least"}[c.max < n], c.max)
				}
			}
		})
	}
}
