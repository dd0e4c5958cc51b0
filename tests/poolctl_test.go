//go:build linux

package tests

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/llamastate/llamastatetest"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// TestPoolMountCtlTree: a pool mount has the local mount's /.kvfs tree,
// served from the pool, on a host other than the writer's:
// kvfs match --mount gives kvfs match --pool's answer, hits and misses;
// /.kvfs/match/<hex> links to the snapshot that holds a key's prefix;
// /.kvfs/prefix/PATH@N is the file the engine (or llama.cpp) would have
// written for N tokens, read at unaligned offsets; /.kvfs/whole/PATH of a
// whole-layout snapshot, or of a file that is none, is the file; /.kvfs/stats is JSON. A token count
// a file does not allow, a file that is no snapshot, and names that are
// not views are ENOENT; the tree is read-only, and /.kvfs can be neither
// made, removed nor renamed over.
func TestPoolMountCtlTree(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	model := snapgen.Model{ID: "test/pool-ctl", Layers: 3, KVHeads: 2, HeadDim: 64, DType: snapgen.Tiny.DType}
	tokens := snapgen.Tokens(3000, 60)
	snaps := map[int][]byte{}
	if err := os.MkdirAll(filepath.Join(a, "ns", "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1200, 3000} {
		snaps[n] = snapshotFile(t, model, tokens[:n])
		engineWrite(t, filepath.Join(a, "ns", "m", fmt.Sprintf("s%d.mlxkv", n)), snaps[n], uint64(n))
	}
	// The same 1200 tokens in the blocks layout, as the engine writes it
	// (blocks/ beside the manifest).
	if err := os.MkdirAll(filepath.Join(a, "ns", "blk"), 0o755); err != nil {
		t.Fatal(err)
	}
	bh, bt := model.Snapshot(tokens[:1200])
	if _, _, err := (&mlx.Writer{Layout: mlx.BlocksLayout, BlockBytes: 100 << 10}).Write(filepath.Join(a, "ns", "blk", "s.mlxkv"), bh, bt); err != nil {
		t.Fatal(err)
	}
	llama, _ := llamastatetest.Series(llamastatetest.Spec{Layers: 3, KRow: 256, FlashAttn: true})
	engineWrite(t, filepath.Join(a, "ns", "conv.bin"), llama[4], 5)
	if err := os.WriteFile(filepath.Join(a, "ns", "plain.txt"), []byte("not a cache"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(b, ".kvfs")
	waitFor(t, "the files through B", func() error {
		_, err := os.Stat(filepath.Join(b, "ns", "plain.txt"))
		if err == nil {
			_, err = os.Stat(filepath.Join(b, "ns", "blk", "s.mlxkv"))
		}
		return err
	})

	// kvfs match --mount through B answers as kvfs match --pool.
	h, _ := model.Snapshot(tokens[:10])
	for _, c := range []struct {
		name   string
		prompt []uint32
		model  string
		hit    bool
		tokens int64
	}{
		{"longer prompt", snapgen.Extend(tokens[:3000], 50, 61), h.ModelID, true, 3000},
		{"shorter prompt", tokens[:2000], h.ModelID, true, 1999},
		{"branch", snapgen.Extend(tokens[:1500], 100, 62), h.ModelID, true, 1500},
		{"other tokens", snapgen.Tokens(900, 63), h.ModelID, false, 0},
		{"other model", tokens[:2000], "test/none", false, 0},
	} {
		tokFile := filepath.Join(t.TempDir(), "prompt.json")
		pj, _ := json.Marshal(c.prompt)
		os.WriteFile(tokFile, pj, 0o644)
		args := []string{"match", "--model", c.model, "--fingerprint", h.ConfigFingerprint, "--tokens", tokFile}
		code, viaPool, errOut := poolKvfs(t, env, args...)
		if code != 0 && code != 1 {
			t.Fatalf("%s: kvfs match --pool: exit %d: %s", c.name, code, errOut)
		}
		_, viaMount, errOut2 := poolKvfs(t, env, append(args, "--mount", b)...)
		var rp, rm store.MatchResult
		if json.Unmarshal([]byte(viaPool), &rp) != nil || json.Unmarshal([]byte(viaMount), &rm) != nil {
			t.Fatalf("%s: --pool %q (%s), --mount %q (%s)", c.name, viaPool, errOut, viaMount, errOut2)
		}
		if rp.Hit != c.hit || rp.Tokens != c.tokens || rm.Hit != rp.Hit || rm.Path != rp.Path || rm.Tokens != rp.Tokens ||
			rm.SnapshotTokens != rp.SnapshotTokens || rm.Reason != rp.Reason {
			t.Fatalf("%s: kvfs match --pool %+v, --mount %+v (want hit %v at %d)", c.name, rp, rm, c.hit, c.tokens)
		}
	}

	// /.kvfs/match/<hex h(k)>: the snapshot that holds the key's prefix.
	keys := mlx.ChainKeys(h.ModelID, h.ConfigFingerprint, h.NS, tokens)
	link, err := os.Readlink(filepath.Join(ctl, "match", hex.EncodeToString(keys[8][:])))
	if err != nil || !strings.HasSuffix(link, "ns/m/s1200.mlxkv") && !strings.HasSuffix(link, "ns/m/s3000.mlxkv") {
		t.Fatalf("match link of h(8): %q, %v", link, err)
	}
	got, err := os.ReadFile(filepath.Join(ctl, "match", hex.EncodeToString(keys[10][:])))
	if err != nil || !bytes.Equal(got, snaps[3000]) {
		t.Fatalf("reading through the match link of h(10): %d bytes, %v", len(got), err)
	}
	v := make([]byte, 32)
	n, err := unix.Lgetxattr(filepath.Join(ctl, "match", hex.EncodeToString(keys[10][:])), "security.kvfs.tokens", v)
	if err != nil || string(v[:max(n, 0)]) != "2560" {
		t.Fatalf("security.kvfs.tokens of h(10)'s link: %q, %v", v[:max(n, 0)], err)
	}
	if _, err := os.Lstat(filepath.Join(ctl, "match", hex.EncodeToString(make([]byte, 32)))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a key no snapshot holds: %v", err)
	}

	// /.kvfs/prefix/PATH@N: the file the engine writes for N tokens, read
	// whole and at unaligned offsets.
	short := snapshotFile(t, model, tokens[:1700])
	view := filepath.Join(ctl, "prefix", "ns", "m", "s3000.mlxkv@1700")
	if err := sameBytes(view, short, 7); err != nil {
		t.Fatalf("prefix view @1700: %v", err)
	}
	lf, err := llamastate.Parse(bytes.NewReader(llama[2]), int64(len(llama[2])), "conv")
	if err != nil {
		t.Fatal(err)
	}
	lview := filepath.Join(ctl, "prefix", "ns", fmt.Sprintf("conv.bin@%d", len(lf.Tokens)))
	if err := sameBytes(lview, llama[2], 8); err != nil {
		t.Fatalf("llama.cpp prefix view @%d: %v", len(lf.Tokens), err)
	}
	if err := sameBytes(filepath.Join(ctl, "whole", "ns", "m", "s1200.mlxkv"), snaps[1200], 9); err != nil {
		t.Fatalf("whole view: %v", err)
	}
	if err := sameBytes(filepath.Join(ctl, "whole", "ns", "blk", "s.mlxkv"), snaps[1200], 10); err != nil {
		t.Fatalf("whole view of a blocks-layout snapshot: %v", err)
	}
	if err := sameBytes(filepath.Join(ctl, "prefix", "ns", "blk", "s.mlxkv@1000"), snapshotFile(t, model, tokens[:1000]), 11); err != nil {
		t.Fatalf("prefix view of a blocks-layout snapshot: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(ctl, "whole", "ns", "plain.txt")); err != nil || string(got) != "not a cache" {
		t.Fatalf("whole view of a file that is no snapshot: %q, %v", got, err)
	}
	ents, err := os.ReadDir(filepath.Join(ctl, "prefix", "ns"))
	if err != nil || len(ents) != 2 || ents[0].Name() != "blk" || ents[1].Name() != "m" || !ents[0].IsDir() {
		t.Fatalf("/.kvfs/prefix/ns lists %v, %v; want its directories blk and m only", ents, err)
	}
	for _, p := range []string{
		"prefix/ns/m/s3000.mlxkv@3001", "prefix/ns/m/s3000.mlxkv@0", "prefix/ns/m/s3000.mlxkv@abc",
		"prefix/ns/m/s3000.mlxkv@01", "prefix/ns/m/s3000.mlxkv", "prefix/ns/plain.txt@1", "prefix/ns/none.mlxkv@5",
		"whole/ns/none", "nothing", "match/zz",
	} {
		if _, err := os.Stat(filepath.Join(ctl, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/.kvfs/%s: %v, want ENOENT", p, err)
		}
	}

	// /.kvfs/stats.
	var st struct {
		Names int `json:"names"`
	}
	if b, err := os.ReadFile(filepath.Join(ctl, "stats")); err != nil || json.Unmarshal(b, &st) != nil || st.Names < 5 {
		t.Fatalf("/.kvfs/stats: %s, %v", b, err)
	}

	// Read-only, and reserved.
	if err := os.WriteFile(filepath.Join(ctl, "whole", "ns", "m", "s1200.mlxkv"), []byte("x"), 0o644); err == nil {
		t.Fatal("a whole view was written")
	}
	if err := os.WriteFile(filepath.Join(ctl, "new"), []byte("x"), 0o644); err == nil {
		t.Fatal("a file was made in /.kvfs")
	}
	if err := os.Mkdir(filepath.Join(b, ".kvfs"), 0o755); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("mkdir /.kvfs: %v", err)
	}
	if err := os.Remove(filepath.Join(b, ".kvfs")); err == nil {
		t.Fatal("/.kvfs was removed")
	}
	if err := os.Rename(filepath.Join(b, "ns", "plain.txt"), filepath.Join(b, ".kvfs")); err == nil {
		t.Fatal("a file was renamed over /.kvfs")
	}
	if _, err := os.ReadFile(filepath.Join(b, "ns", "plain.txt")); err != nil {
		t.Fatalf("the file refused a rename over /.kvfs: %v", err)
	}
}

// snapshotFile is a whole-layout snapshot of tokens, of model m.
func snapshotFile(t *testing.T, m snapgen.Model, tokens []uint32) []byte {
	t.Helper()
	b, err := m.Bytes(tokens)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
