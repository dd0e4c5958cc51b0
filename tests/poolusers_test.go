//go:build linux

package tests

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// TestPoolMountOtherUserLimits (issue 26, item 4; issue 30): a pool mount
// root mounted, used by another (unprivileged) user. Without allow_other
// the kernel refuses the other user everything. With it, the mount shows
// every file with the owner and mode it was made with (pool.Owner) and
// every directory as root's, 0755 (the pool keeps no directories), and the
// kernel checks those (default_permissions): the other user reads root's
// 0644 files, not its 0600 ones, and cannot write, truncate, create,
// rename, remove, chmod or mkdir; nor unmount the mount or read the
// host's directory (cache, spool, log). Root's mkdir 0700 is refused: the
// pool would show it 0755 to every user. The
// /.kvfs tree follows the same rules, read-only.
func TestPoolMountOtherUserLimits(t *testing.T) {
	u := otherUser(t)
	env, _ := poolServices(t)
	open := func(mnt string) {
		for d := filepath.Dir(mnt); d != "/" && strings.HasPrefix(d, os.TempDir()) && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	denied := func(what, script string) {
		t.Helper()
		out, err := u.sh(script)
		if err == nil || !strings.Contains(out, "ermission denied") && !strings.Contains(out, "not permitted") {
			t.Errorf("another user could %s: %v %q", what, err, out)
		}
	}
	t.Run("private", func(t *testing.T) {
		m := poolMount(t, env, "private")
		open(m)
		if err := os.WriteFile(filepath.Join(m, "f"), []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
		denied("read a pool mount without allow_other", "cat "+filepath.Join(m, "f"))
		denied("read /.kvfs/whole without allow_other", "cat "+filepath.Join(m, ".kvfs", "whole", "f"))
		denied("read /.kvfs/stats without allow_other", "cat "+filepath.Join(m, ".kvfs", "stats"))
		denied("list a pool mount without allow_other", "ls "+m)
		denied("write a pool mount without allow_other", "echo x > "+filepath.Join(m, "g"))
	})
	t.Run("allow_other", func(t *testing.T) {
		m := poolMount(t, env, "shared", "-o", "allow_other")
		open(m)
		host := filepath.Join(filepath.Dir(m), "host-shared")
		f, secret, d := filepath.Join(m, "f"), filepath.Join(m, "secret"), filepath.Join(m, "d")
		if err := os.WriteFile(f, []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "g"), []byte("root's too"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := u.shOK(t, "cat "+f); got != "root's" {
			t.Fatalf("other user read %q", got)
		}
		if got := u.shOK(t, "stat -c '%U %a' "+f+" "+d); got != "root 644\nroot 755\n" {
			t.Fatalf("other user's stat: %q", got)
		}
		// The /.kvfs tree follows: readable, never writable.
		if got := u.shOK(t, "cat "+filepath.Join(m, ".kvfs", "whole", "f")); got != "root's" {
			t.Fatalf("other user read /.kvfs/whole/f as %q", got)
		}
		if got := u.shOK(t, "stat -c '%U %a' "+filepath.Join(m, ".kvfs", "whole", "f")+" "+filepath.Join(m, ".kvfs")); got != "root 444\nroot 555\n" {
			t.Fatalf("other user's stat of the tree: %q", got)
		}
		u.shOK(t, "cat "+filepath.Join(m, ".kvfs", "stats")+" >/dev/null")
		denied("write a view", "echo x > "+filepath.Join(m, ".kvfs", "whole", "f"))
		denied("create in /.kvfs", "echo x > "+filepath.Join(m, ".kvfs", "mine"))
		denied("overwrite root's file", "echo x > "+f)
		denied("append to root's file", "echo x >> "+f)
		denied("truncate root's file", "truncate -s 0 "+f)
		denied("create a file", "echo x > "+filepath.Join(m, "mine"))
		denied("create a file in a directory root made 0777", "echo x > "+filepath.Join(d, "mine"))
		denied("mkdir", "mkdir "+filepath.Join(m, "dir"))
		denied("rename root's file", "mv "+f+" "+filepath.Join(m, "moved"))
		denied("remove root's file", "rm -f "+f)
		denied("remove root's directory's file", "rm -f "+filepath.Join(d, "g"))
		denied("chmod root's file", "chmod 600 "+f)
		denied("read the host's directory", "ls "+host)
		denied("read the host's log", "cat "+filepath.Join(host, "kvfs.log"))
		if out, err := u.sh(kvfsBin + " unmount " + m); err == nil {
			t.Errorf("another user unmounted root's pool mount: %q", out)
		}
		if got, err := os.ReadFile(f); err != nil || string(got) != "root's" {
			t.Fatalf("root's file after the other user's attempts: %q, %v", got, err)
		}
		if got, err := os.ReadFile(filepath.Join(d, "g")); err != nil || string(got) != "root's too" {
			t.Fatalf("root's file in d after the other user's attempts: %q, %v", got, err)
		}
		// A file root creates 0600 (or under umask 077, or with mkstemp)
		// keeps its mode (pool.Owner): the other user cannot read it, nor
		// its /.kvfs/whole view; a chmod 0600 of a file it could read
		// takes reading away. The pool keeps no directories, so a
		// directory made 0700 is refused.
		if err := os.WriteFile(secret, []byte("root's secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		denied("read root's 0600 file", "cat "+secret)
		denied("read root's 0600 file's whole view", "cat "+filepath.Join(m, ".kvfs", "whole", "secret"))
		denied("probe root's 0600 file's prefix view", "cat "+filepath.Join(m, ".kvfs", "prefix", "secret@1"))
		if err := os.WriteFile(filepath.Join(m, "h"), []byte("root's"), 0o644); err != nil {
			t.Fatal(err)
		}
		u.shOK(t, "cat "+filepath.Join(m, "h"))
		if err := os.Chmod(filepath.Join(m, "h"), 0o600); err != nil {
			t.Fatal(err)
		}
		denied("read root's file after its chmod 0600", "cat "+filepath.Join(m, "h"))
		// A snapshot root made 0600 is no answer of /.kvfs/match or
		// /.kvfs/candidates for the other user; it is for root.
		model := snapgen.Model{ID: "test/private", Layers: 1, KVHeads: 1, HeadDim: 64, DType: snapgen.Tiny.DType}
		tokens := snapgen.Tokens(600, 70)
		if err := os.WriteFile(filepath.Join(m, "p.mlxkv"), snapshotFile(t, model, tokens), 0o600); err != nil {
			t.Fatal(err)
		}
		h, _ := model.Snapshot(tokens[:1])
		k := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, tokens)[2]
		match := filepath.Join(m, ".kvfs", "match", hex.EncodeToString(k[:]))
		cands := filepath.Join(m, ".kvfs", "candidates", hex.EncodeToString(k[:]))
		if _, err := os.Readlink(match); err != nil {
			t.Fatalf("root's match of its own snapshot: %v", err)
		}
		if ents, err := os.ReadDir(cands); err != nil || len(ents) != 1 {
			t.Fatalf("root's candidates: %v, %v", ents, err)
		}
		if out, err := u.sh("readlink " + match); err == nil || strings.Contains(out, "p.mlxkv") {
			t.Fatalf("the other user's match of root's 0600 snapshot: %v %q", err, out)
		}
		if out, err := u.sh("ls " + cands); err == nil || !strings.Contains(out, "No such file") {
			t.Fatalf("the other user's candidates of root's 0600 snapshot: %v %q", err, out)
		}
		// A blocks-layout snapshot whose manifest root makes readable but
		// whose blocks it keeps 0600 (mlx.Writer writes every file 0600):
		// its views would hand out the blocks' bytes.
		if err := os.Mkdir(filepath.Join(m, "blk"), 0o755); err != nil {
			t.Fatal(err)
		}
		// (the writer makes blk/blocks 0700, as the engine does)
		bh, bt := model.Snapshot(tokens)
		if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 64 << 10}).Write(filepath.Join(m, "blk", "s.mlxkv"), bh, bt); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(m, "blk", "s.mlxkv"), 0o644); err != nil {
			t.Fatal(err)
		}
		u.shOK(t, "head -c 10 "+filepath.Join(m, "blk", "s.mlxkv")+" >/dev/null")
		denied("read a whole view of private blocks", "cat "+filepath.Join(m, ".kvfs", "whole", "blk", "s.mlxkv"))
		denied("read a prefix view of private blocks", "cat "+filepath.Join(m, ".kvfs", "prefix", "blk", "s.mlxkv@300"))
		if _, err := os.ReadFile(filepath.Join(m, ".kvfs", "whole", "blk", "s.mlxkv")); err != nil {
			t.Fatalf("root's whole view of its blocks-layout snapshot: %v", err)
		}
		// A directory root makes 0700 is 0700 (pool.SetDirOwner): the
		// other user cannot list it or reach its files.
		if err := os.Mkdir(filepath.Join(m, "private"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m, "private", "x"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		denied("list root's 0700 directory", "ls "+filepath.Join(m, "private"))
		denied("read a file in root's 0700 directory", "cat "+filepath.Join(m, "private", "x"))
		if got := u.shOK(t, "stat -c '%U %a' "+filepath.Join(m, "private")); got != "root 700\n" {
			t.Fatalf("other user's stat of root's 0700 directory: %q", got)
		}
		names := poolNames(t, env)
		for _, want := range []string{"f", "d/g", "h", "secret", "p.mlxkv", "blk/s.mlxkv", "private/x"} {
			if !names[want] {
				t.Fatalf("pool names after the other user's attempts: %v, want %s", names, want)
			}
			delete(names, want)
		}
		for n := range names {
			if !strings.HasPrefix(n, "blk/blocks/") {
				t.Fatalf("pool name %q after the other user's attempts", n)
			}
		}
	})
}
