//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// prefixViewPath is the view of the mount's file rel cut to n tokens.
func prefixViewPath(m *mount, rel string, n int) string {
	return m.path(fmt.Sprintf(".kvfs/prefix/%s@%d", rel, n))
}

// writeRef writes, outside the mount, the engine-format whole-layout file
// of the first n of the tokens drawn from seed, with the mlx Writer.
func writeRef(t testing.TB, model snapgen.Model, total, n int, seed uint64) string {
	t.Helper()
	ref := filepath.Join(t.TempDir(), fmt.Sprintf("ref-%d-%d.mlxkv", seed, n))
	if err := model.WriteFile(ref, snapgen.Tokens(total, seed)[:n]); err != nil {
		t.Fatal(err)
	}
	return ref
}

func storeStats(t testing.TB, m *mount) store.Stats {
	t.Helper()
	b, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil {
		t.Fatal(err)
	}
	var st store.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("stats %s: %v", b, err)
	}
	return st
}

// TestPrefixViewLlama: process A writes a 12,000-token snapshot shaped
// like Llama-3-8B's cache (4 of its layers, see llama4) through the mount,
// in either layout, under names holding '@'; process B mmaps
// /.kvfs/prefix/<path>@8960 and finds it byte for byte the whole-layout
// file the mlx Writer makes of the first 8,960 tokens. A cp of the view
// into the mount stores none of its tensor bytes again: the only new
// chunks are its header's.
func TestPrefixViewLlama(t *testing.T) {
	m := newMount(t)
	const total, n = 12000, 8960
	ref := writeRef(t, llama4, total, n, 1)
	refSize := fileSize(t, ref)
	for _, layout := range []string{"whole", "blocks"} {
		t.Run(layout, func(t *testing.T) {
			dir := "snaps/" + layout + "/ns@x"
			rel := dir + "/llama@v1@2.mlxkv"
			if err := os.MkdirAll(m.path(dir), 0o755); err != nil {
				t.Fatal(err)
			}
			runClientOK(t, "prefixwrite", "llama4", layout, m.path(rel), fmt.Sprint(total), "1")
			view := prefixViewPath(m, rel, n)
			runClientOK(t, "prefixcheck", view, ref)

			before := storeStats(t, m)
			copyPath := m.path("copies/" + layout + ".mlxkv")
			sh(t, fmt.Sprintf("mkdir -p %s && cp '%s' %s", filepath.Dir(copyPath), view, copyPath))
			sh(t, fmt.Sprintf("cmp %s %s", ref, copyPath))
			after := storeStats(t, m)
			s, err := mlx.ReadFile(copyPath)
			if err != nil {
				t.Fatal(err)
			}
			headerEnd := int64(mlx.PrefixLen) + int64(s.Prefix.HeaderLen)
			newChunks, newBytes := after.Chunks-before.Chunks, after.StoredBytes-before.StoredBytes
			t.Logf("cp of the %d-byte view: %d new chunks, %d new bytes (header %d bytes)", refSize, newChunks, newBytes, headerEnd)
			if newBytes > headerEnd || newChunks > (headerEnd+after.ChunkSize-1)/after.ChunkSize {
				t.Errorf("cp of the view stored %d new chunks, %d bytes: more than its %d-byte header", newChunks, newBytes, headerEnd)
			}
		})
	}
}

// statErr stats p in a separate process and returns its error output.
func statErr(t testing.TB, p string) string {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%s", p).CombinedOutput()
	if err == nil {
		return ""
	}
	return string(out)
}

// TestPrefixViewRefused: a view that the snapshot's kinds do not allow,
// or whose name is not name@N with a valid N, does not exist (ENOENT),
// and the daemon logs why.
func TestPrefixViewRefused(t *testing.T) {
	m := newMount(t)
	if err := os.MkdirAll(m.path("d/sub@3"), 0o755); err != nil {
		t.Fatal(err)
	}
	runClientOK(t, "prefixwrite", "tiny", "whole", m.path("d/a.mlxkv"), "600", "1")
	if err := os.WriteFile(m.path("d/notes.txt"), []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A state-space layer (never trimmable) and a kv layer reusable from
	// 300 tokens only.
	ssm := &mlx.Header{ModelID: "m", ConfigFingerprint: "f", TokenizerHash: "t", Tokens: make([]uint32, 10),
		Caches: []mlx.CacheEntry{{Kind: mlx.KindSSM, Offset: 10, Tensors: []mlx.Slot{
			{Shape: []int64{1, 3, 8}, DType: mlx.Float32}, {Shape: []int64{1, 2, 4, 4}, DType: mlx.Float32}}}}}
	writeHeader(t, m.path("d/ssm.mlxkv"), ssm)
	mro := int64(300)
	h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(600, 2))
	for i := range h.Caches {
		h.Caches[i].MinimumReusableOffset = &mro
	}
	if _, _, err := (&mlx.Writer{}).Write(m.path("d/mro.mlxkv"), h, tensors); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, reason string }{
		{"a.mlxkv@0", "not a positive decimal"},
		{"a.mlxkv@601", "cannot trim 600 tokens to 601"},
		{"a.mlxkv@abc", "not a positive decimal"},
		{"a.mlxkv@-5", "not a positive decimal"},
		{"a.mlxkv@+5", "not a positive decimal"},
		{"a.mlxkv@0512", "not a positive decimal"},
		{"a.mlxkv@", "not a positive decimal"},
		{"a.mlxkv", "has no @N"},
		{"sub@3@2", "a directory"},
		{"notes.txt@5", "not a snapshot"},
		{"ssm.mlxkv@5", "ssm state cannot be cut"},
		{"mro.mlxkv@200", "reusable from 300 tokens, not 200"},
	} {
		p := m.path(".kvfs/prefix/d/" + c.name)
		if out := statErr(t, p); !strings.Contains(out, "No such file or directory") {
			t.Errorf("stat %s: %q, want ENOENT", c.name, out)
		}
		if log := daemonLog(m); !strings.Contains(log, c.reason) {
			t.Errorf("%s: the daemon's log does not say %q", c.name, c.reason)
		}
	}
	// Allowed: the whole length, one token, minimumReusableOffset itself;
	// a directory whose name holds '@' is a directory.
	for _, name := range []string{"a.mlxkv@600", "a.mlxkv@1", "mro.mlxkv@300", "sub@3"} {
		if out := statErr(t, m.path(".kvfs/prefix/d/"+name)); out != "" {
			t.Errorf("stat %s: %s", name, out)
		}
	}
	runClientOK(t, "prefixcheck", m.path(".kvfs/prefix/d/a.mlxkv@1"), writeRef(t, snapgen.Tiny, 600, 1, 1))
	// Only directories are listed.
	if got := strings.Fields(sh(t, "ls "+m.path(".kvfs/prefix/d"))); len(got) != 1 || got[0] != "sub@3" {
		t.Errorf("ls .kvfs/prefix/d = %q, want [sub@3]", got)
	}
	if got := sh(t, "ls "+m.path(".kvfs")); !strings.Contains(got, "prefix") {
		t.Errorf("ls .kvfs = %q, no prefix", got)
	}
}

// writeHeader writes a whole-layout snapshot of h with zero tensors.
func writeHeader(t testing.TB, path string, h *mlx.Header) {
	t.Helper()
	var tensors []mlx.Tensor
	for _, s := range h.Slots() {
		n := int64(s.DType.Size())
		for _, d := range s.Shape {
			n *= d
		}
		tensors = append(tensors, mlx.Contiguous(make([]byte, n), s.DType, s.Shape...))
	}
	if _, _, err := (&mlx.Writer{}).Write(path, h, tensors); err != nil {
		t.Fatal(err)
	}
}

// TestPrefixViewRewrite: a view follows its original. After the original
// is replaced (renamed over, as the engine writes), rewritten in place
// (cp over it), renamed or removed, the view serves the new content or
// nothing: never the bytes of a version that is gone, though the old
// version's view was made and cached.
func TestPrefixViewRewrite(t *testing.T) {
	m := newMount(t)
	const total, n = 600, 512
	if err := os.Mkdir(m.path("r"), 0o755); err != nil {
		t.Fatal(err)
	}
	for layout, write := range map[string]func(seed string){
		"whole": func(seed string) {
			runClientOK(t, "prefixwrite", "tiny", "whole", m.path("r/w.mlxkv"), fmt.Sprint(total), seed)
		},
		"blocks": func(seed string) {
			runClientOK(t, "prefixwrite", "tiny", "blocks", m.path("r/b.mlxkv"), fmt.Sprint(total), seed)
		},
	} {
		rel := map[string]string{"whole": "r/w.mlxkv", "blocks": "r/b.mlxkv"}[layout]
		view := prefixViewPath(m, rel, n)
		write("1")
		runClientOK(t, "prefixcheck", view, writeRef(t, snapgen.Tiny, total, n, 1))
		write("2") // the engine's atomic rename over the original
		runClientOK(t, "prefixcheck", view, writeRef(t, snapgen.Tiny, total, n, 2))
		// In place: cp truncates and rewrites the same file.
		src := filepath.Join(t.TempDir(), "src.mlxkv")
		w := &mlx.Writer{}
		if layout == "blocks" {
			w.Layout = mlx.BlocksLayout
			src = filepath.Join(filepath.Dir(m.path(rel)), "src3.mlxkv")
		}
		h, tensors := snapgen.Tiny.Snapshot(snapgen.Tokens(total, 3))
		if _, _, err := w.Write(src, h, tensors); err != nil {
			t.Fatal(err)
		}
		sh(t, fmt.Sprintf("cp %s %s", src, m.path(rel)))
		runClientOK(t, "prefixcheck", view, writeRef(t, snapgen.Tiny, total, n, 3))
		// Renamed: the old name has no view, the new one the content.
		sh(t, fmt.Sprintf("mv %s %s", m.path(rel), m.path(rel+".moved")))
		gone(t, layout+": renamed original", view)
		runClientOK(t, "prefixcheck", prefixViewPath(m, rel+".moved", n), writeRef(t, snapgen.Tiny, total, n, 3))
		sh(t, "rm "+m.path(rel+".moved"))
		gone(t, layout+": removed original", prefixViewPath(m, rel+".moved", n))
	}
}

// gone checks that view no longer exists: an open at once fails (the
// daemon checks the view's place at each open, and the kernel looks the
// name up again on ESTALE), and so does a stat once the kernel's entry
// for the name has expired (a jiffy: the view tree is not told of
// renames, so a stat within it may be answered from the kernel's cache,
// as for /.kvfs/whole).
func gone(t *testing.T, what, view string) {
	t.Helper()
	if out, err := exec.Command("cat", view).CombinedOutput(); err == nil || !strings.Contains(string(out), "No such file") {
		t.Errorf("%s: open of the view: %v %.100q, want ENOENT", what, err, out)
	}
	time.Sleep(20 * time.Millisecond)
	if out := statErr(t, view); !strings.Contains(out, "No such file") {
		t.Errorf("%s: stat of the view: %q, want ENOENT", what, out)
	}
}

// TestPrefixViewAccess: another user sees a view only as the original's
// permissions allow: EACCES for a file it may not read or in a directory
// it may not search, the view's bytes once it may.
func TestPrefixViewAccess(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	for _, d := range []string{"open", "closed"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		runClientOK(t, "prefixwrite", "tiny", "whole", m.path(d+"/a.mlxkv"), "600", "1")
	}
	if err := os.Chmod(m.path("closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The Writer makes 0600 files: not the other user's to read.
	for _, p := range []string{"open/a.mlxkv", "closed/a.mlxkv"} {
		out, err := u.sh("cat " + prefixViewPath(m, p, 512) + " >/dev/null")
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("other user reads the view of %s: %v %q, want EACCES", p, err, out)
		}
	}
	if err := os.Chmod(m.path("open/a.mlxkv"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("closed/a.mlxkv"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := writeRef(t, snapgen.Tiny, 600, 512, 1)
	if err := os.Chmod(filepath.Dir(ref), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ref, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := u.client(t, "prefixcheck", prefixViewPath(m, "open/a.mlxkv", 512), ref).CombinedOutput()
	if err != nil {
		t.Errorf("other user, readable original: %v\n%s", err, out)
	}
	if out, err := u.sh("cat " + prefixViewPath(m, "closed/a.mlxkv", 512) + " >/dev/null"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("other user reads a view in a directory it may not search: %v %q", err, out)
	}
}

// TestPrefixViewConcurrent: readers in four processes open, fstat and
// read a view whole, over and over, while a writer replaces the original
// with one version and then the other: every read is one version whole,
// never a mix, and fstat of an open view never fails (ESTALE) once the
// original has been replaced.
func TestPrefixViewConcurrent(t *testing.T) {
	m := newMount(t)
	const total, n = 600, 512
	if err := os.Mkdir(m.path("c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, layout := range []string{"whole", "blocks"} {
		rel := "c/" + layout + ".mlxkv"
		write := func(seed int) {
			runClientOK(t, "prefixwrite", "tiny", layout, m.path(rel), fmt.Sprint(total), fmt.Sprint(seed))
		}
		write(1)
		refs := []string{writeRef(t, snapgen.Tiny, total, n, 1), writeRef(t, snapgen.Tiny, total, n, 2)}
		var readers []*exec.Cmd
		outs := make([]*strings.Builder, 4)
		for i := range outs {
			outs[i] = new(strings.Builder)
			c := client("prefixreadloop", append([]string{prefixViewPath(m, rel, n), "1.5"}, refs...)...)
			c.Stdout, c.Stderr = outs[i], outs[i]
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			readers = append(readers, c)
		}
		writes := 0
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); writes++ {
			write(2 - writes%2)
		}
		for i, c := range readers {
			if err := c.Wait(); err != nil {
				t.Errorf("%s: reader %d: %v\n%s", layout, i, err, outs[i])
			}
		}
		var reads []string
		for _, o := range outs {
			reads = append(reads, strings.TrimSpace(o.String()))
		}
		t.Logf("%s: %d rewrites; reads per reader: %v", layout, writes, reads)
	}
}
