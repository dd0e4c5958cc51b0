//go:build linux

package tests

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

type matchAnswer struct {
	Hit    bool   `json:"hit"`
	Path   string `json:"path"`
	Tokens int64  `json:"tokens"`
	Reason string `json:"reason"`
}

// TestMatchThroughMount: process A writes snapshots through the mount;
// processes B find the best one for a prompt, as root and as an ordinary
// user, through /.kvfs/match links, kvfs match (socket and --mount), the
// control socket's POST /v1/match and the engine's own start-up scan,
// all agreeing. A snapshot in a directory the user may not search is
// never revealed to the user.
func TestMatchThroughMount(t *testing.T) {
	m := newMount(t, "-o", "allow_other")
	m.openToOthers(t)
	u := otherUser(t)
	const seed = 77
	// a: 1100 tokens, readable by all; c: 2000 tokens of the same text, in
	// a directory only root may search.
	runClientOK(t, "match-write", m.path("fp/base/a.mlxkv"), fmt.Sprint(seed), "1100")
	runClientOK(t, "match-write", m.path("secret/base/c.mlxkv"), fmt.Sprint(seed), "2000")
	runClientOK(t, "match-write", m.path("fp/base/other.mlxkv"), "5", "900")
	if err := os.Chmod(m.path("secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The prompt: the first 1500 tokens, then 50 others.
	prompt := snapgen.Extend(snapgen.Tokens(1500, seed), 50, 424242)
	tokFile := filepath.Join(filepath.Dir(kvfsBin), fmt.Sprintf("prompt-%d.json", os.Getpid()))
	b, _ := json.Marshal(prompt)
	if err := os.WriteFile(tokFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tokFile)
	model, fp := matchModel.ID, matchModel.ID+"-fp"
	keys := mlx.ChainKeys(model, fp, "", prompt)
	link := func(k int) string { return m.path(".kvfs/match/" + hex.EncodeToString(keys[k][:])) }

	// Root: c holds 1500 tokens (trimmed), found under h5 (1280 tokens).
	if out := strings.TrimSpace(runClientOK(t, "match-link", link(5))); out != "../../secret/base/c.mlxkv 1280" {
		t.Errorf("root: match link h5 = %q", out)
	}
	// The user may not search secret/: h5 is not there for them, h4 is a.
	if out := strings.TrimSpace(clientOut(t, u.client(t, "match-link", link(5)))); out != "ENOENT" {
		t.Errorf("user: match link h5 = %q, want ENOENT", out)
	}
	if out := strings.TrimSpace(clientOut(t, u.client(t, "match-link", link(4)))); out != "../../fp/base/a.mlxkv 1024" {
		t.Errorf("user: match link h4 = %q", out)
	}
	// The link resolves inside the mount: it opens the snapshot.
	if _, err := mlx.ReadFile(link(4)); err != nil {
		t.Errorf("open through the link: %v", err)
	}

	cli := func(run func(args ...string) string, args ...string) matchAnswer {
		t.Helper()
		out := run(append([]string{"match", "--model", model, "--fingerprint", fp, "--tokens", tokFile}, args...)...)
		var a matchAnswer
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("kvfs match %v: %q: %v", args, out, err)
		}
		return a
	}
	asRoot := func(args ...string) string { return kvfs(t, args...) }
	asUser := func(args ...string) string {
		return clientOut(t, u.command(execCommand(kvfsBin, args...)))
	}
	rootWant := matchAnswer{Hit: true, Path: "secret/base/c.mlxkv", Tokens: 1500}
	userWant := matchAnswer{Hit: true, Path: "fp/base/a.mlxkv", Tokens: 1100}
	if a := cli(asRoot, m.store); a != rootWant {
		t.Errorf("root: kvfs match STORE = %+v, want %+v", a, rootWant)
	}
	if a := cli(asRoot, "--mount", m.mnt); a != rootWant {
		t.Errorf("root: kvfs match --mount = %+v, want %+v", a, rootWant)
	}
	if a := cli(asUser, "--mount", m.mnt); a != userWant {
		t.Errorf("user: kvfs match --mount = %+v, want %+v", a, userWant)
	}
	// HTTP on the control socket (root's: the socket is the store owner's).
	if a := httpMatch(t, m, store.MatchQuery{Model: model, Fingerprint: fp, Tokens: prompt}); a != rootWant {
		t.Errorf("POST /v1/match = %+v, want %+v", a, rootWant)
	}
	// A miss says why, the same way everywhere.
	if a := httpMatch(t, m, store.MatchQuery{Model: model, Fingerprint: fp, NS: "french", Tokens: prompt}); a.Hit || a.Reason != "namespace" {
		t.Errorf("POST /v1/match in another namespace = %+v", a)
	}
	if a := cli(asUser, "--mount", m.mnt, "--ns", "french"); a.Hit || a.Reason != "namespace" {
		t.Errorf("user: kvfs match --mount --ns french = %+v", a)
	}
	if a := cli(asUser, "--mount", m.mnt, "--model", "nope"); a.Hit || a.Reason != "no-snapshot-for-model" {
		t.Errorf("user: kvfs match --mount --model nope = %+v", a)
	}

	// The engine's start-up scan through the mount agrees.
	var scan matchAnswer
	out := clientOut(t, u.client(t, "match-scan", m.path("fp/base"), fmt.Sprint(seed), "1500", "50"))
	if err := json.Unmarshal([]byte(out), &scan); err != nil || "fp/base/"+scan.Path != userWant.Path || scan.Tokens != userWant.Tokens {
		t.Errorf("user: the engine's scan found %q (%v), kvfs %+v", out, err, userWant)
	}
	out = runClientOK(t, "match-scan", m.path("secret/base"), fmt.Sprint(seed), "1500", "50")
	if err := json.Unmarshal([]byte(out), &scan); err != nil || "secret/base/"+scan.Path != rootWant.Path || scan.Tokens != rootWant.Tokens {
		t.Errorf("root: the engine's scan found %q (%v), kvfs %+v", out, err, rootWant)
	}

	// Counted in /.kvfs/stats.
	var st store.Stats
	sb, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil || json.Unmarshal(sb, &st) != nil {
		t.Fatalf("stats: %v\n%s", err, sb)
	}
	if st.Match.Hits < 2 || st.Match.Misses["namespace"] < 1 {
		t.Errorf("stats match = %+v", st.Match)
	}
	// Removing the snapshot removes it from the index.
	if err := os.Remove(m.path("secret/base/c.mlxkv")); err != nil {
		t.Fatal(err)
	}
	if out := strings.TrimSpace(runClientOK(t, "match-link", link(5))); out != "ENOENT" {
		t.Errorf("root: match link h5 after removal = %q", out)
	}
	if a := httpMatch(t, m, store.MatchQuery{Model: model, Fingerprint: fp, Tokens: prompt}); a != userWant {
		t.Errorf("POST /v1/match after removal = %+v, want %+v", a, userWant)
	}
}

func httpMatch(t *testing.T, m *mount, q store.MatchQuery) matchAnswer {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(m.store, "kvfs.sock"))
	}}}
	b, _ := json.Marshal(q)
	resp, err := c.Post("http://kvfs/v1/match", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a matchAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/match: %s: %v", resp.Status, err)
	}
	return a
}

// clientOut runs cmd and returns its standard output, failing the test
// on error.
func clientOut(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
	}
	return string(out)
}

func execCommand(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }

// TestMatchMetrics: lookups are counted in the metrics, hits and misses by
// reason, as in /.kvfs/stats.
func TestMatchMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := newMount(t, "--metrics", addr)
	runClientOK(t, "match-write", m.path("fp/base/a.mlxkv"), "3", "600")
	model, fp := matchModel.ID, matchModel.ID+"-fp"
	prompt := snapgen.Extend(snapgen.Tokens(600, 3), 10, 1)
	for _, q := range []store.MatchQuery{
		{Model: model, Fingerprint: fp, Tokens: prompt},
		{Model: model, Fingerprint: fp, NS: "x", Tokens: prompt},
		{Model: model, Fingerprint: fp, NS: "x", Tokens: prompt},
		{Model: model, Fingerprint: fp, Tokens: prompt[:100]},
	} {
		httpMatch(t, m, q)
	}
	for name, want := range map[string]int64{
		"kvfs_match_hits_total":                                       1,
		`kvfs_match_misses_total{reason="namespace"}`:                 2,
		`kvfs_match_misses_total{reason="prompt-shorter-than-group"}`: 1,
		`kvfs_match_misses_total{reason="not-trimmable"}`:             0,
	} {
		if got := metric(t, addr, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}
