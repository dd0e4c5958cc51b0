//go:build linux

package tests

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
)

// fullAnswer is a kvfs match answer, every field.
type fullAnswer struct {
	Hit            bool   `json:"hit"`
	Path           string `json:"path"`
	Tokens         int64  `json:"tokens"`
	SnapshotTokens int64  `json:"snapshotTokens"`
	Trim           bool   `json:"trim"`
	Reason         string `json:"reason"`
}

// TestMatchMountAgreesWithSocket: kvfs match --mount (walking
// /.kvfs/match and /.kvfs/candidates) gives the control socket's answer
// for every prompt, as root and as a user who may not see every snapshot,
// where a single link per key cannot: an older snapshot sharing fewer
// tokens past the key, a snapshot usable only past a group boundary
// (minimumReusableOffset) and one that cannot be trimmed to a boundary
// (red team 11's "MountWalkDisagrees").
func TestMatchMountAgreesWithSocket(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	base := snapgen.Tokens(2000, 31)
	write := func(rel string, tokens []uint32, blocks bool, edit func(*mlx.Header)) {
		t.Helper()
		writeMatchSnap(t, m, rel, tokens, blocks, edit)
	}
	minOffset := func(off int64) func(*mlx.Header) {
		return func(h *mlx.Header) {
			for i := range h.Caches {
				h.Caches[i].MinimumReusableOffset = &off
			}
		}
	}
	wrapped := func(h *mlx.Header) {
		for i := range h.Caches {
			h.Caches[i].Kind = mlx.KindRotating
			h.Caches[i].MaxSize = h.Caches[i].Offset
			h.Caches[i].Idx = 0
		}
	}
	// In commit order: a shares 600 tokens of the base, b 700 (blocks
	// layout), ring all 1024 but cannot be trimmed, late is usable only
	// from 880 tokens on and sits where the user may not search.
	write("fp/base/a.mlxkv", snapgen.Extend(base[:600], 300, 1), false, nil)
	write("fp/base/b.mlxkv", snapgen.Extend(base[:700], 300, 2), true, nil)
	write("fp/base/ring.mlxkv", base[:1024], false, wrapped)
	write("secret/base/late.mlxkv", base[:900], false, minOffset(880))
	write("fp/base/z-other.mlxkv", snapgen.Tokens(1300, 99), false, nil)
	if err := os.Chmod(m.path("secret"), 0o700); err != nil {
		t.Fatal(err)
	}

	// The candidates of h(2) (512 tokens): a, b, ring and, for root, late,
	// earliest committed first, each a link to its snapshot.
	keys := mlx.ChainKeys(matchModel.ID, matchModel.ID+"-fp", "", base)
	dir := m.path(".kvfs/candidates/" + hex.EncodeToString(keys[2][:]))
	list := func(asUser bool) []string {
		t.Helper()
		var names []string
		if asUser {
			names = strings.Fields(clientOut(t, u.command(execCommand("ls", "-1", dir))))
		} else {
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				names = append(names, e.Name())
			}
		}
		var targets []string
		sort.Slice(names, func(i, j int) bool {
			a, _ := strconv.ParseUint(names[i], 10, 64)
			b, _ := strconv.ParseUint(names[j], 10, 64)
			return a < b
		})
		for _, n := range names {
			tg, err := os.Readlink(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			targets = append(targets, tg)
		}
		return targets
	}
	want := []string{"../../../fp/base/a.mlxkv", "../../../fp/base/b.mlxkv", "../../../fp/base/ring.mlxkv", "../../../secret/base/late.mlxkv"}
	if got := list(false); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("root: candidates of h(2) = %q, want %q", got, want)
	}
	if got := list(true); fmt.Sprint(got) != fmt.Sprint(want[:3]) {
		t.Errorf("user: candidates of h(2) = %q, want %q", got, want[:3])
	}
	// A link opens its snapshot; the model key and h0 have no candidates.
	if _, err := mlx.ReadFile(filepath.Join(dir, mustFirstEntry(t, dir))); err != nil {
		t.Errorf("open through a candidate: %v", err)
	}
	for _, k := range []mlx.ChainKey{mlx.ModelKey(matchModel.ID, matchModel.ID+"-fp"), keys[0]} {
		if _, err := os.Stat(m.path(".kvfs/candidates/" + hex.EncodeToString(k[:]))); !os.IsNotExist(err) {
			t.Errorf("candidates of a model or namespace key: %v, want ENOENT", err)
		}
	}

	tokFile := filepath.Join(filepath.Dir(kvfsBin), fmt.Sprintf("cand-prompt-%d.json", os.Getpid()))
	defer os.Remove(tokFile)
	answer := func(run func(args ...string) string, prompt []uint32, where ...string) fullAnswer {
		t.Helper()
		b, _ := json.Marshal(prompt)
		if err := os.WriteFile(tokFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out := run(append([]string{"match", "--model", matchModel.ID, "--fingerprint", matchModel.ID + "-fp", "--tokens", tokFile}, where...)...)
		var a fullAnswer
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("kvfs match %v: %q: %v", where, out, err)
		}
		return a
	}
	asRoot := func(args ...string) string { return kvfs(t, args...) }
	asUser := func(args ...string) string { return clientOut(t, u.command(execCommand(kvfsBin, args...))) }
	// The cases the single links answered otherwise, checked by hand; then
	// every prompt length, both ways.
	for _, c := range []struct {
		run  func(...string) string
		who  string
		n    int
		want fullAnswer
	}{
		{asRoot, "root", 1000, fullAnswer{Hit: true, Path: "secret/base/late.mlxkv", Tokens: 900, SnapshotTokens: 900}},
		{asUser, "user", 1000, fullAnswer{Hit: true, Path: "fp/base/b.mlxkv", Tokens: 700, SnapshotTokens: 1000, Trim: true}},
		{asUser, "user", 650, fullAnswer{Hit: true, Path: "fp/base/b.mlxkv", Tokens: 650, SnapshotTokens: 1000, Trim: true}},
		{asRoot, "root", 870, fullAnswer{Hit: true, Path: "fp/base/b.mlxkv", Tokens: 700, SnapshotTokens: 1000, Trim: true}},
	} {
		prompt := snapgen.Extend(base[:c.n], 20, 5)
		if got := answer(c.run, prompt, "--mount", m.mnt); got != c.want {
			t.Errorf("%s, a prompt sharing %d: kvfs match --mount = %+v, want %+v", c.who, c.n, got, c.want)
		}
	}
	// Every prompt length, root through the socket and through the mount;
	// the user through the mount, against the socket's answer once late
	// (the one snapshot the user may not see) is gone.
	type q struct{ n, extra int }
	var qs []q
	userAnswers := map[q]fullAnswer{}
	for _, n := range []int{100, 300, 520, 600, 650, 700, 777, 880, 899, 900, 1000, 1023, 1024, 1500} {
		for _, extra := range []int{0, 20} {
			c := q{n, extra}
			qs = append(qs, c)
			prompt := snapgen.Extend(base[:n], extra, 5)
			sock, mnt := answer(asRoot, prompt, m.store), answer(asRoot, prompt, "--mount", m.mnt)
			if sock != mnt {
				t.Errorf("root, %d+%d tokens: socket %+v, --mount %+v", n, extra, sock, mnt)
			}
			userAnswers[c] = answer(asUser, prompt, "--mount", m.mnt)
		}
	}
	if err := os.Remove(m.path("secret/base/late.mlxkv")); err != nil {
		t.Fatal(err)
	}
	for _, c := range qs {
		prompt := snapgen.Extend(base[:c.n], c.extra, 5)
		if sock := answer(asRoot, prompt, m.store); sock != userAnswers[c] {
			t.Errorf("user, %d+%d tokens: --mount %+v, the socket without late %+v", c.n, c.extra, userAnswers[c], sock)
		}
	}
}

func mustFirstEntry(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("list %s: %v (%d entries)", dir, err, len(ents))
	}
	return ents[0].Name()
}
