//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/llamastate/llamastatetest"
)

// TestLlamaMatch: llama.cpp state files are found by prefix lookup (issue
// 29): kvfs match --like FILE (the shape of a state file the caller has
// stands for the model) answers, through the daemon's socket and through
// the mount's /.kvfs tree alike, the file whose tokens best seed a prompt,
// whatever its name; the hit, cut to the prompt's prefix, is the view
// /.kvfs/prefix/PATH@N, byte for byte the file of those tokens. A file of
// another shape never answers; one that cannot be cut (a sliding-window
// model's two caches) answers only whole; a user who may not read a file
// is not told of it.
func TestLlamaMatch(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	spec := llamastatetest.Spec{Layers: 2, KRow: 256, FlashAttn: true}
	swa := llamastatetest.Spec{Session: true, Arch: "gemma3", Layers: 2, KRow: 256, FlashAttn: true, Caches: 2}
	other := llamastatetest.Spec{Layers: 3, KRow: 256, FlashAttn: true}
	tok := make([]uint32, 3000)
	for i := range tok {
		tok[i] = uint32(i*31 + 7)
	}
	branch := append(append([]uint32(nil), tok[:900]...), 1, 2, 3)
	files := []struct {
		rel    string
		spec   llamastatetest.Spec
		tokens []uint32
		mode   os.FileMode
	}{
		{"slots/a.bin", spec, tok[:600], 0o644},
		{"slots/b", spec, tok[:1200], 0o644},
		{"slots/branch.state", spec, branch, 0o644},
		{"private/long.bin", spec, tok[:2600], 0o600},
		{"slots/other.bin", other, tok[:2900], 0o644},
		{"swa/whole.bin", swa, tok[:1500], 0o644},
	}
	dir := t.TempDir()
	for _, f := range files {
		b := llamastatetest.Write(f.spec, f.tokens)
		sh(t, "mkdir -p "+filepath.Dir(m.path(f.rel)))
		if err := os.WriteFile(m.path(f.rel), b, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(f.rel, "/", "_")), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	like := filepath.Join(dir, "like.state") // the caller's own file of the model: any tokens
	if err := os.WriteFile(like, llamastatetest.Write(spec, []uint32{5, 6, 7}), 0o644); err != nil {
		t.Fatal(err)
	}
	likeSWA := filepath.Join(dir, "like-swa.state")
	if err := os.WriteFile(likeSWA, llamastatetest.Write(swa, []uint32{5}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ask := func(asUser bool, likeFile string, prompt []uint32, where ...string) fullAnswer {
		t.Helper()
		tf := filepath.Join(dir, fmt.Sprintf("p%d.json", len(prompt)))
		b, _ := json.Marshal(prompt)
		if err := os.WriteFile(tf, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"match", "--like", likeFile, "--tokens", tf}, where...)
		cmd := execCommand(kvfsBin, args...)
		if asUser {
			cmd = u.command(cmd)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kvfs %v: %v: %s", args, err, out)
		}
		var a fullAnswer
		if err := json.Unmarshal(out, &a); err != nil {
			t.Fatalf("kvfs %v: %q: %v", args, out, err)
		}
		return a
	}
	for _, c := range []struct {
		name   string
		asUser bool
		like   string
		prompt []uint32
		want   fullAnswer
	}{
		{"longest prefix, not another shape's", false, like, append(append([]uint32(nil), tok[:2800]...), 9, 9), fullAnswer{Hit: true, Path: "private/long.bin", Tokens: 2600, SnapshotTokens: 2600}},
		{"longest prefix, cut", false, like, append(append([]uint32(nil), tok[:2000]...), 9, 9), fullAnswer{Hit: true, Path: "private/long.bin", Tokens: 2000, SnapshotTokens: 2600, Trim: true}},
		{"not told of what it may not read", true, like, append(append([]uint32(nil), tok[:2000]...), 9, 9), fullAnswer{Hit: true, Path: "slots/b", Tokens: 1200, SnapshotTokens: 1200}},
		{"a branch", true, like, append(append([]uint32(nil), branch...), 4, 5), fullAnswer{Hit: true, Path: "slots/branch.state", Tokens: 903, SnapshotTokens: 903}},
		{"no common group", false, like, append([]uint32{1}, tok[:400]...), fullAnswer{Reason: "no-common-prefix"}},
		{"whole only", false, likeSWA, tok[:1500], fullAnswer{Reason: "not-trimmable"}},
		{"whole", false, likeSWA, append(append([]uint32(nil), tok[:1500]...), 1), fullAnswer{Hit: true, Path: "swa/whole.bin", Tokens: 1500, SnapshotTokens: 1500}},
		{"another shape", false, filepath.Join(dir, "slots_other.bin"), tok[:200], fullAnswer{Reason: "prompt-shorter-than-group"}},
	} {
		for _, where := range [][]string{{m.store}, {"--mount", m.mnt}} {
			if c.asUser && where[0] == m.store {
				continue // a store is its owner's (the socket is root's)
			}
			if got := ask(c.asUser, c.like, c.prompt, where...); got != c.want {
				t.Errorf("%s (%s): %+v, want %+v", c.name, where[len(where)-1], got, c.want)
			}
		}
	}
	// The model of no stored file, and a file that is no cache.
	otherModel := filepath.Join(dir, "like-other.state")
	if err := os.WriteFile(otherModel, llamastatetest.Write(llamastatetest.Spec{Layers: 5, KRow: 64, FlashAttn: true}, []uint32{1}), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ask(false, otherModel, tok[:600], m.store); got.Hit || got.Reason != "no-snapshot-for-model" {
		t.Errorf("a model of no file: %+v", got)
	}
	notCache := filepath.Join(dir, "notes.txt")
	os.WriteFile(notCache, []byte("hello, not a cache file at all"), 0o644)
	if out, err := execCommand(kvfsBin, "match", "--like", notCache, "--tokens", notCache, m.store).CombinedOutput(); err == nil || !strings.Contains(string(out), "notes.txt") {
		t.Errorf("--like of a file that is no cache: %v: %s", err, out)
	}
	// kvfs inspect names the model --like stands for.
	var rep struct{ Llama struct{ Model string } }
	if err := json.Unmarshal([]byte(kvfs(t, "inspect", "--json", like)), &rep); err != nil || !strings.HasPrefix(rep.Llama.Model, "llama:") {
		t.Fatalf("inspect --json %s: %+v %v", like, rep, err)
	}
	tf := filepath.Join(dir, "p.json")
	pb, _ := json.Marshal(append(append([]uint32(nil), tok[:2800]...), 9, 9))
	os.WriteFile(tf, pb, 0o644)
	var byModel fullAnswer
	if err := json.Unmarshal([]byte(kvfs(t, "match", "--model", rep.Llama.Model, "--fingerprint", "llama.cpp", "--tokens", tf, m.store)), &byModel); err != nil ||
		byModel != (fullAnswer{Hit: true, Path: "private/long.bin", Tokens: 2600, SnapshotTokens: 2600}) {
		t.Errorf("match --model of inspect's model: %+v %v", byModel, err)
	}
	// The hit cut to the prompt's prefix is the file saved at that length.
	sh(t, fmt.Sprintf("cmp %s %s", m.path(".kvfs/prefix/private/long.bin@1200"), filepath.Join(dir, "slots_b")))
}
