//go:build linux

package tests

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// poolMount mounts the pool of env with kvfs mount --pool (in the
// background, as users do), with its own directory (cache, spool, log),
// and unmounts it at cleanup.
func poolMount(t testing.TB, env []string, name string, mountArgs ...string) string {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := poolKvfs(t, env, append(append([]string{"mount"}, mountArgs...), filepath.Join(dir, "host-"+name), mnt)...); code != 0 {
		t.Fatalf("kvfs mount --pool (%s): exit %d\n%s%s", name, code, out, errOut)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "host-"+name, "kvfs.log"))
			t.Logf("daemon %s's log:\n%s", name, lastLines(log, 30))
		}
		if code, out, errOut := poolKvfs(t, env, "unmount", mnt); code != 0 {
			t.Errorf("kvfs unmount %s: exit %d\n%s%s", mnt, code, out, errOut)
		}
	})
	return mnt
}

// waitFor polls until fn succeeds (another host's change shows after the
// mount's listing and attribute timeout, 1 s), for at most 10 s.
func waitFor(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// engineWrite writes data to final in the mount as the engine writes a
// snapshot: a temporary file, written in unaligned pieces, fsynced,
// closed and renamed over the final name.
func engineWrite(t *testing.T, final string, data []byte, seed uint64) {
	t.Helper()
	tmp := final + ".tmp"
	if err := writeSynced(tmp, data, rand.New(rand.NewPCG(seed, 2)), 700_000); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
}

// writeSynced writes data to a new file at path in pieces of 1 to
// maxPiece bytes drawn from r (whole, with r nil), fsyncs and closes it.
func writeSynced(path string, data []byte, r *rand.Rand, maxPiece int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); {
		n := len(data) - off
		if r != nil {
			n = min(n, 1+r.IntN(maxPiece))
		}
		if _, err := f.Write(data[off : off+n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		off += n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// sameBytes reads path whole and at random unaligned ranges, in a
// separate process (cmp and dd), and compares with want.
func sameBytes(path string, want []byte, seed uint64) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s: %d bytes, differ from the %d written", path, len(got), len(want))
	}
	r := rand.New(rand.NewPCG(seed, 3))
	for range 5 {
		off := r.IntN(len(want))
		n := 1 + r.IntN(min(len(want)-off, 3<<20))
		out, err := exec.Command("dd", "if="+path, "bs=256K", fmt.Sprintf("skip=%d", off), fmt.Sprintf("count=%d", n), "iflag=skip_bytes,count_bytes", "status=none").Output()
		if err != nil {
			return fmt.Errorf("dd %s at %d+%d: %v", path, off, n, err)
		}
		if !bytes.Equal(out, want[off:off+n]) {
			return fmt.Errorf("%s at %d+%d: bytes differ", path, off, n)
		}
	}
	return nil
}

// TestPoolMountTwoHosts (issue 14): two daemons on one machine (their own
// directories, caches and mount points; one pool). A snapshot written
// through mount A as the engine writes it is listed and read
// byte-identical through mount B, whole and at unaligned offsets; a
// prefix-growth series written alternately through A and B stores each
// chunk once in the pool; a removal through B shows in A; a file cannot
// be changed in place, only replaced.
func TestPoolMountTwoHosts(t *testing.T) {
	env, svc := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")

	snap := make([]byte, 9<<20+12345)
	crand.Read(snap)
	if err := os.MkdirAll(filepath.Join(a, "models", "llama"), 0o755); err != nil {
		t.Fatal(err)
	}
	engineWrite(t, filepath.Join(a, "models", "llama", "p1.mlxkv"), snap, 1)
	inB := filepath.Join(b, "models", "llama", "p1.mlxkv")
	waitFor(t, "the snapshot through B", func() error { return sameBytes(inB, snap, 1) })
	out, err := exec.Command("ls", filepath.Join(b, "models", "llama")).Output()
	if err != nil || string(out) != "p1.mlxkv\n" {
		t.Fatalf("ls through B: %q, %v", out, err)
	}
	if fi, err := os.Stat(inB); err != nil || fi.Size() != int64(len(snap)) || !fi.Mode().IsRegular() {
		t.Fatalf("stat through B: %v, %v", fi, err)
	}

	// The series: snapshot k holds the first 1 MiB × (2 + 2k) + 777 bytes
	// of one token stream.
	base := make([]byte, 20<<20)
	crand.Read(base)
	before := poolPackBytes(t, svc)
	distinct := map[[32]byte]int{}
	for k := range 6 {
		n := 1<<20*(2+2*k) + 777
		mnt := a
		if k%2 == 1 {
			mnt = b
		}
		engineWrite(t, filepath.Join(mnt, fmt.Sprintf("series-%d", k)), base[:n], uint64(k))
		for _, c := range poolChunks(t, base[:n]) {
			distinct[c.Sum] = int(c.Len)
		}
	}
	want := 0
	for _, n := range distinct {
		want += n
	}
	if got := poolPackBytes(t, svc) - before; got != int64(want) {
		t.Fatalf("the series stored %d bytes in the pool's packs, want %d (each distinct chunk once)", got, want)
	}
	for k := range 6 {
		n := 1<<20*(2+2*k) + 777
		for _, mnt := range []string{a, b} {
			p := filepath.Join(mnt, fmt.Sprintf("series-%d", k))
			waitFor(t, "series through "+mnt, func() error { return sameBytes(p, base[:n], uint64(k)) })
		}
	}

	// Removal through B shows through A.
	if err := os.Remove(filepath.Join(b, "series-0")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removal through A", func() error {
		if _, err := os.Stat(filepath.Join(a, "series-0")); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	// In place: refused; replaced (O_TRUNC): the new bytes.
	if _, err := os.OpenFile(filepath.Join(a, "series-1"), os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("open for append: %v, want EOPNOTSUPP", err)
	}
	if err := os.WriteFile(filepath.Join(a, "series-1"), []byte("replaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replacement through B", func() error {
		got, err := os.ReadFile(filepath.Join(b, "series-1"))
		if err != nil || string(got) != "replaced" {
			return fmt.Errorf("%q, %v", got, err)
		}
		return nil
	})
	// Names that are arbitrary bytes (not UTF-8) travel too.
	odd := filepath.Join(a, "odd\xff\x01name")
	if err := os.WriteFile(odd, []byte("odd"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an odd name through B", func() error {
		got, err := os.ReadFile(filepath.Join(b, "odd\xff\x01name"))
		if err != nil || string(got) != "odd" {
			return fmt.Errorf("%q, %v", got, err)
		}
		return nil
	})
	if names, _ := filepath.Glob(filepath.Join(b, "*.tmp")); len(names) != 0 {
		t.Fatalf("temporary names left: %q", names)
	}
	t.Logf("series: %d distinct chunks, %d bytes stored once", len(distinct), want)

	// A snapshot written through A, as the engine writes it (tmp,
	// rename), is matched by a lookup of the pool and read through B.
	tokens := snapgen.Tokens(1300, 21)
	h, tensors := snapgen.Tiny.Snapshot(tokens)
	src := filepath.Join(t.TempDir(), "s.mlxkv")
	if _, _, err := (&mlx.Writer{}).Write(src, h, tensors); err != nil {
		t.Fatal(err)
	}
	snapBytes, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	engineWrite(t, filepath.Join(a, "models", "llama", "s.mlxkv"), snapBytes, 2)
	tokFile := filepath.Join(t.TempDir(), "prompt.json")
	prompt, _ := json.Marshal(snapgen.Extend(tokens[:1000], 20, 3))
	os.WriteFile(tokFile, prompt, 0o644)
	code, out2, errOut := poolKvfs(t, env, "match", "--model", h.ModelID, "--fingerprint", h.ConfigFingerprint, "--tokens", tokFile)
	var r store.MatchResult
	if code != 0 || json.Unmarshal([]byte(out2), &r) != nil || !r.Hit || r.Path != "models/llama/s.mlxkv" || r.Tokens != 1000 || !r.Trim {
		t.Fatalf("kvfs match --pool: exit %d: %s%s", code, out2, errOut)
	}
	waitFor(t, "the matched snapshot through B", func() error { return sameBytes(filepath.Join(b, r.Path), snapBytes, 4) })

	// kvfs stats of a pool mount's directory: the pool's figures and the
	// host's cache (B read every file, so it holds chunks).
	code, stats, errOut := poolKvfs(t, env, "stats", filepath.Join(filepath.Dir(b), "host-b"))
	if code != 0 || !strings.Contains(stats, "names:         8\n") || !regexp.MustCompile(`cache: +[1-9][0-9]* chunks`).MatchString(stats) {
		t.Fatalf("kvfs stats of B's directory: exit %d\n%s%s", code, stats, errOut)
	}
	t.Logf("kvfs stats:\n%s", stats)
}

// poolPackBytes is the bytes of the pool's pack objects (files under
// versitygw's bucket directory).
// poolChunks is b cut as a pool of the default chunk size cuts a file
// (store.Cut, with no parent).
func poolChunks(t *testing.T, b []byte) []store.Chunk {
	t.Helper()
	var out []store.Chunk
	_, err := store.Cut(context.Background(), bytes.NewReader(b), int64(len(b)), store.CutOptions{ChunkSize: 1 << 20},
		func(cs []store.Chunk, _ int64, _ []byte) error {
			out = append(out, cs...)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func poolPackBytes(t *testing.T, svc string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(filepath.Join(svc, "s3", "kvfs", "pool", "packs"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			total += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
