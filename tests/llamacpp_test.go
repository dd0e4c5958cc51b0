//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfs/kvfs/llamastate"
	"github.com/kvfs/kvfs/store"
)

// llamaDriver runs tests/llamacpp/driver.mjs: a real llama.cpp, the
// prebuilt one of node-llama-cpp 3.21.1, which scripts/setup installs
// into tests/llamacpp/node_modules.
func llamaDriver(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := os.Stat("llamacpp/node_modules/node-llama-cpp"); err != nil {
		t.Fatalf("node-llama-cpp is not installed (run scripts/setup): %v", err)
	}
	cmd := exec.Command("node", append([]string{"driver.mjs"}, args...)...)
	cmd.Dir = "llamacpp"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node driver.mjs %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// llamaIdeal is what a token-aware store of the files in dir keeps: each
// distinct cell's K and V once (a cell is the same when the tokens up to
// it are), and each file's bytes other than K and V.
func llamaIdeal(t *testing.T, paths []string) (ideal, logical int64) {
	cells := map[[32]byte]bool{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		st, err := llamastate.Parse(f, fi.Size(), p)
		f.Close()
		if err != nil {
			t.Fatalf("the real llama.cpp's file does not parse: %v", err)
		}
		var kv int64
		for _, b := range st.Blocks() {
			kv += b.Rows * b.RowBytes
		}
		perCell := kv / int64(len(st.Tokens))
		var chain [32]byte
		for _, tk := range st.Tokens {
			chain = sha256.Sum256(binary.LittleEndian.AppendUint32(chain[:], tk))
			if !cells[chain] {
				cells[chain] = true
				ideal += perCell
			}
		}
		ideal += fi.Size() - kv
		logical += fi.Size()
	}
	return ideal, logical
}

// mountStats reads the mount's /.kvfs/stats.
func mountStats(t *testing.T, m *mount) store.Stats {
	t.Helper()
	var st store.Stats
	b, err := os.ReadFile(m.path(".kvfs/stats"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("stats: %v %s", err, b)
	}
	return st
}

func storedBytes(t *testing.T, m *mount) int64 { return mountStats(t, m).StoredBytes }

// TestLlamaCppStateFiles: a real llama.cpp saves each turn of a growing
// conversation, and of a second that shares its first 2000 tokens, into
// the mount with llama_state_seq_save_file (node-llama-cpp's
// saveStateToFile), and into a plain directory, with flash attention on
// and off (transposed V). The files are byte-identical; loaded back from
// the mount (also after a remount) they continue exactly as the plain
// copies do (greedy tokens and next-token probabilities); and the mount
// stores them within issue 29's targets of the ideal: 1.25× with flash
// attention, 1.5× without. A trimmed view of a file
// (/.kvfs/prefix/PATH@N) is the file of its first N tokens, and loads as
// it. Each mode has a mount of its own: their
// layer 0 K rows are the same bytes, which would dedup across them.
func TestLlamaCppStateFiles(t *testing.T) {
	work := t.TempDir()
	model := filepath.Join(work, "tiny.gguf")
	llamaDriver(t, "model", model)
	check := []string{"conv-00.state", "conv-09.state", "conv-11.state"}
	continueFiles := func(fa string, files ...string) []string {
		t.Helper()
		var out []string
		sc := bufio.NewScanner(strings.NewReader(llamaDriver(t, append([]string{"continue", model, fa}, files...)...)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r struct {
				Loaded int
				Steps  json.RawMessage
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("driver output %q: %v", sc.Text(), err)
			}
			out = append(out, fmt.Sprintf("%d %s", r.Loaded, r.Steps))
		}
		if len(out) != len(files) {
			t.Fatalf("%d continuations of %d files", len(out), len(files))
		}
		return out
	}
	continuations := func(fa, dir string) []string {
		t.Helper()
		var files []string
		for _, c := range check {
			files = append(files, filepath.Join(dir, c))
		}
		return continueFiles(fa, files...)
	}
	targets := map[string]float64{"on": 1.25, "off": 1.5}
	for _, fa := range []string{"on", "off"} {
		addr := freeAddr(t)
		m := newMount(t, "--metrics", addr)
		hashed := func() float64 { return chunkSumHashed(t, addr) }
		plain := filepath.Join(work, "plain-"+fa)
		dir := m.path("llama/fa-" + fa)
		sh(t, "mkdir -p "+plain+" "+dir)
		before, h0 := storedBytes(t, m), hashed()
		llamaDriver(t, "save", model, fa, dir, plain)
		h1 := hashed()
		paths, _ := filepath.Glob(filepath.Join(plain, "*.state"))
		if len(paths) != 12 {
			t.Fatalf("flash attention %s: %d files saved", fa, len(paths))
		}
		for _, p := range paths {
			sh(t, fmt.Sprintf("cmp %s %s", p, filepath.Join(dir, filepath.Base(p))))
		}
		ideal, logical := llamaIdeal(t, paths)
		stored := storedBytes(t, m) - before
		ratio := float64(stored) / float64(ideal)
		t.Logf("flash attention %s: %d files, %d bytes; stored %d, ideal %d: %.3f× the ideal (dedup %.2f×)",
			fa, len(paths), logical, stored, ideal, ratio, float64(logical)/float64(stored))
		if ratio > targets[fa] {
			t.Errorf("flash attention %s: stored %.3f× the ideal, want at most %.2f×", fa, ratio, targets[fa])
		}
		// llama.cpp writes its files in order: they are hashed as they
		// are written, not by their commits.
		t.Logf("flash attention %s: the commits hashed %g of the %d bytes", fa, h1-h0, logical)
		if !strings.Contains(os.Getenv("KVFS_TEST_MOUNT_ARGS"), "writeback") && h1-h0 > float64(logical)/10 {
			t.Errorf("flash attention %s: the commits hashed %g of the %d bytes llama.cpp wrote in order, want nearly none", fa, h1-h0, logical)
		}
		want := continuations(fa, plain)
		if got := continuations(fa, dir); !equalLines(got, want) {
			t.Fatalf("flash attention %s: loaded from the mount, llama.cpp continues otherwise:\n%v\nplain:\n%v", fa, got, want)
		}
		// A trimmed view of the 3100-token file at 2800 tokens is the file
		// llama.cpp saved at 2800, byte for byte, and loads as it.
		view := m.path(".kvfs/prefix/llama/fa-" + fa + "/conv-09.state@2800")
		sh(t, fmt.Sprintf("cmp %s %s", view, filepath.Join(plain, "conv-08.state")))
		if got, want := continueFiles(fa, view), continueFiles(fa, filepath.Join(plain, "conv-08.state")); !equalLines(got, want) {
			t.Fatalf("flash attention %s: the view @2800 continues otherwise than the file saved at 2800", fa)
		}
		kvfs(t, "unmount", m.mnt)
		m.check(t)
		m.start(t)
		if got := continuations(fa, dir); !equalLines(got, want) {
			t.Fatalf("flash attention %s, after a remount: llama.cpp continues otherwise", fa)
		}
	}
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
