//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"golang.org/x/sys/unix"
)

// Clients of the prefix-lookup tests (match_test.go).
func init() {
	// match-write PATH SEED N: writes, as the engine does (mlx.Writer:
	// a .tmp, then a rename), a whole-layout snapshot of the first N
	// tokens drawn from SEED, mode 0644.
	clients["match-write"] = func(args []string) error {
		seed, _ := strconv.ParseUint(args[1], 10, 64)
		n, _ := strconv.Atoi(args[2])
		h, tensors := matchModel.Snapshot(snapgen.Tokens(n, seed))
		if err := os.MkdirAll(filepath.Dir(args[0]), 0o755); err != nil {
			return err
		}
		if _, _, err := (&mlx.Writer{}).Write(args[0], h, tensors); err != nil {
			return err
		}
		return os.Chmod(args[0], 0o644)
	}
	// match-link LINK: prints the link's target and its usable token
	// count (security.kvfs.tokens), or "ENOENT".
	clients["match-link"] = func(args []string) error {
		t, err := os.Readlink(args[0])
		if os.IsNotExist(err) {
			fmt.Println("ENOENT")
			return nil
		}
		if err != nil {
			return err
		}
		b := make([]byte, 32)
		n, err := unix.Lgetxattr(args[0], "security.kvfs.tokens", b) // the link's own
		if err != nil {
			return fmt.Errorf("getxattr %s: %w", args[0], err)
		}
		fmt.Println(t, string(b[:n]))
		return nil
	}
	// match-scan DIR SEED N EXTRA: the engine's start-up scan (FORMAT.md
	// §5.2, §5.3) through the mount: reads every header in the namespace
	// directory DIR, then finds the longest prefix of the prompt (the
	// first N tokens of SEED, then EXTRA others); prints {"path","tokens"}.
	clients["match-scan"] = func(args []string) error {
		seed, _ := strconv.ParseUint(args[1], 10, 64)
		n, _ := strconv.Atoi(args[2])
		extra, _ := strconv.Atoi(args[3])
		prompt := snapgen.Extend(snapgen.Tokens(n, seed), extra, 424242)
		ents, err := os.ReadDir(args[0])
		if err != nil {
			return err
		}
		best, bestP := "", 0
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".mlxkv") {
				continue
			}
			snap, err := mlx.ReadFile(filepath.Join(args[0], e.Name()))
			if err != nil {
				continue // not ours to read, or not a snapshot
			}
			h := snap.Header
			p := 0
			for p < len(h.Tokens) && p < len(prompt) && h.Tokens[p] == prompt[p] {
				p++
			}
			p = min(p, len(prompt)-1)
			if p == 0 || p <= bestP || int64(p) < mlx.MinReusable(h) || len(h.Tokens) > p && !mlx.Trimmable(h) {
				continue
			}
			best, bestP = e.Name(), p
		}
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"path": best, "tokens": bestP})
	}
}

// matchModel is the model of the match tests: 1 KiB of cache per token.
var matchModel = snapgen.Tiny
