//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// poolEnv starts etcd and an S3 server with scripts/services, as the
// README tells users to, and returns the environment it printed (stopped
// at cleanup).
func poolEnv(t testing.TB) []string {
	env, _ := poolServices(t)
	return env
}

// envValue is the value of key in env (KEY=VALUE lines, as poolEnv
// returns them), unquoted; "" if absent.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return strings.Trim(v, "'\"")
		}
	}
	return ""
}

// poolServices is poolEnv, and the services' directory.
func poolServices(t testing.TB) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	script, err := filepath.Abs("../scripts/services")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "start")
	cmd.Env = append(os.Environ(), "KVFS_SERVICES_DIR="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/services start: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		stop := exec.Command(script, "stop")
		stop.Env = append(os.Environ(), "KVFS_SERVICES_DIR="+dir)
		if out, err := stop.CombinedOutput(); err != nil {
			t.Errorf("scripts/services stop: %v\n%s", err, out)
		}
	})
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if kv, ok := strings.CutPrefix(sc.Text(), "export "); ok {
			env = append(env, kv)
		}
	}
	if len(env) != 6 {
		t.Fatalf("scripts/services start printed %d export lines, want 6:\n%s", len(env), out)
	}
	return env, dir
}

// poolKvfs runs kvfs with env (on top of this process's, less AWS_* and
// KVFS_*), and returns its exit code, standard output and standard error.
func poolKvfs(t testing.TB, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(kvfsBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "KVFS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// TestPoolCommands: the README's pool walk-through. scripts/services
// starts the servers; kvfs pool put through one host (its own cache),
// ls, get through another (its own cache) byte-identical, get to standard
// output, rm, and kvfs gc --pool reclaim; credentials from a file; the
// errors name what is wrong.
func TestPoolCommands(t *testing.T) {
	env := poolEnv(t)
	dir := t.TempDir()
	data := make([]byte, 2_500_003)
	rand.Read(data)
	src := filepath.Join(dir, "snap.mlxkv")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := poolKvfs(t, env, args...)
		if code != 0 {
			t.Fatalf("kvfs %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	ok("pool", "--cache", filepath.Join(dir, "cacheA"), "put", src, "models/llama/a b.mlxkv")
	if out := ok("pool", "ls", "models/"); out != "models/llama/a b.mlxkv\n" {
		t.Fatalf("pool ls: %q", out)
	}
	dst := filepath.Join(dir, "copy")
	ok("pool", "--cache", filepath.Join(dir, "cacheB"), "get", "models/llama/a b.mlxkv", dst)
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pool get: %v (equal: %v)", err, bytes.Equal(got, data))
	}
	if out := ok("pool", "get", "models/llama/a b.mlxkv", "-"); out != string(data) {
		t.Fatal("pool get to standard output differs")
	}
	// Into a FIFO (as into /dev/null): written into, never replaced.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	ok("pool", "get", "models/llama/a b.mlxkv", fifo)
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("pool get into a FIFO: %d bytes", len(b))
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("pool get replaced the FIFO it wrote into: %v, %v", fi, err)
	}
	// Into a directory: under the name's last part.
	ok("pool", "get", "models/llama/a b.mlxkv", dir)
	if b, err := os.ReadFile(filepath.Join(dir, "a b.mlxkv")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("pool get into a directory: %v", err)
	}
	if out := ok("pool", "--cache", filepath.Join(dir, "cacheB"), "stats"); !strings.Contains(out, "cache:") {
		t.Fatalf("pool stats: %q", out)
	}

	// Credentials from a file, with none in the environment.
	var creds, rest []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "AWS_") {
			creds = append(creds, "export "+kv)
		} else {
			rest = append(rest, kv)
		}
	}
	credFile := filepath.Join(dir, "creds")
	os.WriteFile(credFile, []byte(strings.Join(creds, "\n")+"\n"), 0o600)
	if code, out, errOut := poolKvfs(t, rest, "pool", "--credentials", credFile, "ls"); code != 0 || !strings.Contains(out, "a b.mlxkv") {
		t.Fatalf("pool ls with a credentials file: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := poolKvfs(t, rest, "pool", "ls"); code != 1 || !strings.Contains(errOut, "no credentials") {
		t.Fatalf("pool ls without credentials: exit %d, %q", code, errOut)
	}
	os.WriteFile(credFile, []byte("nothing here\n"), 0o600)
	if code, _, errOut := poolKvfs(t, rest, "pool", "--credentials", credFile, "ls"); code != 1 || !strings.Contains(errOut, credFile) {
		t.Fatalf("pool ls with an empty credentials file: exit %d, %q", code, errOut)
	}

	// Errors.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pool", "get", "nope", "-"}, 1, "open nope: file does not exist"},
		{[]string{"pool", "rm", "nope"}, 1, "remove nope: file does not exist"},
		{[]string{"pool", "put", dir, "x"}, 1, "not a regular file"},
		{[]string{"pool", "put", src, "../x"}, 1, "no . or .. parts"},
		{[]string{"pool", "frob"}, 2, "unknown pool command"},
		{[]string{"pool", "--etcd", "", "ls"}, 2, "--etcd"},
		{[]string{"pool", "--endpoint", "ftp://x", "ls"}, 1, "want http://HOST:PORT"},
		{[]string{"gc", "--pool", "s3://kvfs/pool", "somestore"}, 2, "no STORE"},
	} {
		code, _, errOut := poolKvfs(t, env, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("kvfs %s: exit %d, want %d with %q\n%s", strings.Join(c.args, " "), code, c.code, c.want, errOut)
		}
	}

	// rm, then collect: the dry run deletes nothing, the collection
	// deletes the file's two objects (its manifest, and one pack: the
	// file is smaller than a pack).
	ok("pool", "rm", "models/llama/a b.mlxkv")
	pool := envValue(env, "KVFS_POOL")
	if out := ok("gc", "--pool", pool, "--grace", "1ns", "--dry-run"); !strings.Contains(out, "would delete 2 objects") {
		t.Fatalf("gc --pool --dry-run: %q", out)
	}
	if out := ok("gc", "--pool", pool, "--grace", "1ns"); !strings.Contains(out, "deleted 2 objects") {
		t.Fatalf("gc --pool: %q", out)
	}
	if out := ok("gc", "--pool", pool, "--grace", "1ns"); !strings.Contains(out, "deleted 0 objects") {
		t.Fatalf("second gc --pool: %q", out)
	}

	// A sparse pack is rewritten: b (2.4 MiB, one pack) and c (b's first
	// MiB and a few bytes of its own); once b is removed, most of b's
	// pack is dead, and gc copies c's chunks out of it and deletes it. c reads the same before and after.
	ok("pool", "--cache", filepath.Join(dir, "cacheA"), "put", src, "b")
	c := append(bytes.Clone(data[:1<<20]), "c's own bytes"...)
	srcC := filepath.Join(dir, "c")
	os.WriteFile(srcC, c, 0o644)
	ok("pool", "--cache", filepath.Join(dir, "cacheA"), "put", srcC, "c")
	ok("pool", "rm", "b")
	if code, _, errOut := poolKvfs(t, env, "gc", "--pool", pool, "--threshold", "0"); code != 2 || !strings.Contains(errOut, "--threshold") {
		t.Fatalf("gc --pool --threshold 0: exit %d, %q", code, errOut)
	}
	// The live bytes of b's pack: c's chunks that b's are (cut by
	// content, those that end before c's own bytes).
	bSums := map[[32]byte]bool{}
	for _, ch := range poolChunks(t, data) {
		bSums[ch.Sum] = true
	}
	var live float64
	for _, ch := range poolChunks(t, c) {
		if bSums[ch.Sum] {
			live += float64(ch.Len)
		}
	}
	copied := fmt.Sprintf("(%.1f KiB of live chunks copied into 1 new packs)", live/1024)
	if live >= 1<<20 {
		copied = fmt.Sprintf("(%.1f MiB of live chunks copied into 1 new packs)", live/(1<<20))
	}
	if out := ok("gc", "--pool", pool, "--grace", "1ns", "--dry-run"); !strings.Contains(out, "would rewrite 1 sparse packs "+copied) {
		t.Fatalf("gc --pool --dry-run with a sparse pack: %q, want %q", out, copied)
	}
	out := ok("gc", "--pool", pool, "--grace", "1ns")
	if !strings.Contains(out, "rewrote 1 sparse packs "+copied+"; 1 names moved") ||
		!strings.Contains(out, "deleted 3 objects") { // b's manifest and pack, c's old manifest
		t.Fatalf("gc --pool with a sparse pack: %q", out)
	}
	if got := ok("pool", "get", "c", "-"); got != string(c) {
		t.Fatal("c differs after its pack was rewritten")
	}

	// Capacity: names go least recently used first, never one used
	// within --min-idle.
	dData := make([]byte, 1_500_000)
	rand.Read(dData)
	srcD := filepath.Join(dir, "d")
	os.WriteFile(srcD, dData, 0o644)
	ok("pool", "put", srcD, "d")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--capacity", "1K", "--min-idle", "1h", "--dry-run"}, "would remove 0 names, least recently used first, leaving 2.4 MiB; 2 names used within 1h0m0s kept"},
		{[]string{"--capacity", "2000000", "--min-idle", "0s", "--dry-run"}, "would remove 1 names, least recently used first, leaving 1.4 MiB"},
		{[]string{"--capacity", "2000000", "--min-idle", "0s"}, "removed 1 names, least recently used first, leaving 1.4 MiB"},
	} {
		if out := ok(append([]string{"gc", "--pool", pool, "--grace", "1ns"}, c.args...)...); !strings.Contains(out, c.want) {
			t.Fatalf("gc --pool %s: %q, want %q", strings.Join(c.args, " "), out, c.want)
		}
	}
	if out := ok("pool", "ls"); out != "d\n" {
		t.Fatalf("pool ls after eviction: %q, want d only (c was used less recently)", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gc", "--pool", pool, "--capacity", "lots"}, "--capacity"},
		{[]string{"gc", "--pool", pool, "--capacity", "1G", "--min-idle", "-1s"}, "--min-idle"},
		{[]string{"gc", "--capacity", "1G", "somestore"}, "--capacity is for a pool"},
	} {
		if code, _, errOut := poolKvfs(t, env, c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("kvfs %s: exit %d, %q; want exit 2 naming %s", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
