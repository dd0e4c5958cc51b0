//go:build linux

package tests

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// TestPrefixMatchToView is issue 11's end-to-end case: process A writes a
// 12,000-token Llama-3-8B-shaped snapshot (4 of its 32 layers: the same
// heads and head size) through the mount; process B holds a prompt that
// shares its first 9,000 tokens, finds the snapshot by chain key under
// /.kvfs/match, and mmaps /.kvfs/prefix/<it>@8960, which equals, byte for
// byte, an engine-format file of those 8,960 tokens written directly.
// The CLI and the control socket give the same snapshot.
func TestPrefixMatchToView(t *testing.T) {
	m := newMount(t)
	const total, n, shared = 12000, 8960, 9000
	ref := writeRef(t, llama4, total, n, 1)
	if err := os.MkdirAll(m.path("snaps"), 0o755); err != nil {
		t.Fatal(err)
	}
	runClientOK(t, "prefixwrite", "llama4", "whole", m.path("snaps/a.mlxkv"), fmt.Sprint(total), "1")

	prompt := snapgen.Extend(snapgen.Tokens(total, 1)[:shared], 40, 4242)
	model, fp := llama4.ID, llama4.ID+"-fp"
	keys := mlx.ChainKeys(model, fp, "", prompt)
	k := n / 256 // h(35): the longest whole group shared
	link := m.path(".kvfs/match/" + hex.EncodeToString(keys[k][:]))
	out := strings.TrimSpace(runClientOK(t, "match-link", link))
	if out != fmt.Sprintf("../../snaps/a.mlxkv %d", n) {
		t.Fatalf("B: /.kvfs/match/h(%d) = %q", k, out)
	}
	target := strings.TrimPrefix(strings.Fields(out)[0], "../../")
	runClientOK(t, "prefixcheck", m.path(fmt.Sprintf(".kvfs/prefix/%s@%d", target, n)), ref)

	tokFile := filepath.Join(filepath.Dir(kvfsBin), fmt.Sprintf("prompt-%d.json", os.Getpid()))
	b, _ := json.Marshal(prompt)
	if err := os.WriteFile(tokFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tokFile)
	var cli matchAnswer
	if err := json.Unmarshal([]byte(kvfs(t, "match", "--model", model, "--fingerprint", fp, "--tokens", tokFile, m.store)), &cli); err != nil {
		t.Fatal(err)
	}
	web := httpMatch(t, m, store.MatchQuery{Model: model, Fingerprint: fp, Tokens: prompt})
	if !cli.Hit || cli.Path != target || cli != web || cli.Tokens < n || cli.Tokens >= int64(len(prompt)) {
		t.Fatalf("kvfs match %+v, POST /v1/match %+v: want %s, %d to %d tokens", cli, web, target, n, len(prompt)-1)
	}
}
