package store_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/snapgen"
	"github.com/kvfs/kvfs/store"
)

// The crash test runs a child process (this test binary, dispatched by
// TestMain) that ingests, renames and removes in a loop, logging each
// operation before it starts ("B …") and after it returns ("E"). The parent
// SIGKILLs it at random moments; after each kill it opens the store, checks
// its invariants and checks that the files are exactly the state after the
// last completed operation, or after the one in flight.

const crashEnv = "KVFS_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir, os.Getenv("KVFS_CRASH_LOG"), os.Getenv("KVFS_CRASH_SEED"))
		os.Exit(0)
	}
	if dir := os.Getenv(fsyncCrashEnv); dir != "" {
		fsyncCrashChild(dir, os.Getenv("KVFS_CRASH_LOG"), os.Getenv("KVFS_CRASH_SEED"))
		os.Exit(0)
	}
	if dir := os.Getenv(compactCrashEnv); dir != "" {
		compactCrashChild(dir, os.Getenv("KVFS_CRASH_LOG"), os.Getenv("KVFS_CRASH_SEED"))
		os.Exit(0)
	}
	if dir := os.Getenv(evictCrashEnv); dir != "" {
		evictCrashChild(dir, os.Getenv("KVFS_CRASH_LOG"), os.Getenv("KVFS_CRASH_SEED"))
		os.Exit(0)
	}
	if dir := os.Getenv(sharedCrashEnv); dir != "" {
		sharedCrashChild(dir, os.Getenv("KVFS_CRASH_LOG"), os.Getenv("KVFS_CRASH_SEED"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var crashNames = []string{"f0", "f1", "f2", "f3", "f4", "f5", "s0.mlxkv", "s1.mlxkv", "s2.mlxkv", "s3.mlxkv"}

// crashContent is the content of a file put with seed k under name.
func crashContent(name string, k int) []byte {
	if strings.HasSuffix(name, ".mlxkv") {
		p := filepath.Join(os.TempDir(), fmt.Sprintf("kvfs-crash-%d-%d.mlxkv", os.Getpid(), k))
		defer os.Remove(p)
		// Snapshots extend one conversation, so they share prefixes.
		if err := snapgen.Tiny.WriteFile(p, snapgen.Tokens(40+k%150, 1)); err != nil {
			panic(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			panic(err)
		}
		return b
	}
	shared := randBytes(16384, 42)
	return append(shared[:k%16384], randBytes(k%50000, uint64(k))...)
}

func crashChild(dir, logPath, seed string) {
	n, _ := strconv.ParseUint(seed, 10, 64)
	r := rand.New(rand.NewPCG(n, 99))
	var s *store.Store
	var err error
	for i := 0; i < 100; i++ {
		if s, err = store.Open(dir, store.Options{LockTimeout: 2 * time.Second}); err == nil {
			break
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		os.Exit(2)
	}
	for {
		a, b := crashNames[r.IntN(len(crashNames))], crashNames[r.IntN(len(crashNames))]
		if strings.HasSuffix(a, ".mlxkv") != strings.HasSuffix(b, ".mlxkv") {
			b = a
		}
		var line string
		var op func() error
		switch x := r.IntN(10); {
		case x < 6:
			k := r.IntN(1 << 20)
			content := crashContent(a, k)
			line = fmt.Sprintf("B put %s %d\n", a, k)
			op = func() error {
				_, _, err := s.Put(context.Background(), bytes.NewReader(content), int64(len(content)), "d/"+a, store.PutOptions{})
				return err
			}
		case x < 8:
			line = fmt.Sprintf("B mv %s %s\n", a, b)
			op = func() error { return s.Rename("d/"+a, "d/"+b) }
		default:
			line = fmt.Sprintf("B rm %s\n", a)
			op = func() error { return s.Remove("d/" + a) }
		}
		log.WriteString(line)
		if err := op(); err != nil {
			log.WriteString("F\n")
		} else {
			log.WriteString("E\n")
		}
	}
}

// crashStates replays the log: the state after the last completed
// operation and, if one was in flight, the state had it completed.
func crashStates(t *testing.T, logPath string) (before, after map[string]int) {
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	state := map[string]int{}
	apply := func(st map[string]int, op []string) map[string]int {
		st = maps(st)
		switch op[1] {
		case "put":
			k, _ := strconv.Atoi(op[3])
			st[op[2]] = k
		case "mv":
			if v, ok := st[op[2]]; ok && op[2] != op[3] {
				st[op[3]] = v
				delete(st, op[2])
			}
		case "rm":
			delete(st, op[2])
		}
		return st
	}
	var pending []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case fields[0] == "B":
			pending = fields
		case fields[0] == "E" && pending != nil:
			state = apply(state, pending)
			pending = nil
		case fields[0] == "F":
			pending = nil
		}
	}
	if pending == nil || len(pending) < 3 {
		return state, state
	}
	return state, apply(state, pending)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestCrash(t *testing.T) {
	kills := 200
	if testing.Short() {
		kills = 30
	}
	dir := filepath.Join(t.TempDir(), "store")
	if err := store.Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "ops.log")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil { // a child may die before it writes
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	cache := map[string][]byte{}
	content := func(name string, k int) []byte {
		key := fmt.Sprint(name, k)
		if b, ok := cache[key]; ok {
			return b
		}
		b := crashContent(name, k)
		cache[key] = b
		return b
	}
	inFlight := 0
	for run := 0; run < kills; run++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// TMPDIR: a child killed while it makes a snapshot's bytes
		// (crashContent) leaves its temporary file in the test's
		// directory, which the test removes, not in /tmp.
		cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Dir(logPath), crashEnv+"="+dir, "KVFS_CRASH_LOG="+logPath, fmt.Sprintf("KVFS_CRASH_SEED=%d", r.Uint64()))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(5+r.IntN(120)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("run %d: child exited before the kill: %v\n%s", run, err, stderr.String())
		}

		s, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatalf("run %d: reopen after kill: %v", run, err)
		}
		if err := s.Check(context.Background(), store.CheckOptions{Verify: true}); err != nil {
			s.Close()
			t.Fatalf("run %d: %v", run, err)
		}
		before, after := crashStates(t, logPath)
		if !maps2equal(before, after) {
			inFlight++
		}
		actual := map[string][]byte{}
		ents, err := s.List("d")
		if err != nil && run > 3 {
			// "d" exists once a put has completed.
			if len(before) > 0 {
				t.Fatalf("run %d: list: %v", run, err)
			}
		}
		for _, e := range ents {
			actual[e.Name] = get(t, s, "d/"+e.Name)
		}
		matches := func(want map[string]int) bool {
			if len(want) != len(actual) {
				return false
			}
			for name, k := range want {
				if b, ok := actual[name]; !ok || !bytes.Equal(b, content(name, k)) {
					return false
				}
			}
			return true
		}
		// Resolve the operation in flight, so that the next run's log
		// replays from the state the store is really in.
		switch {
		case maps2equal(before, after):
		case matches(after):
			appendLog(t, logPath, "E\n")
		case matches(before):
			appendLog(t, logPath, "F\n")
		}
		if !matches(before) && !matches(after) {
			names := slices.Sorted(func(yield func(string) bool) {
				for k := range actual {
					if !yield(k) {
						return
					}
				}
			})
			t.Fatalf("run %d: files %v match neither the last committed state %v nor the in-flight one %v", run, names, before, after)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills, %d with an operation in flight", kills, inFlight)
}

func maps2equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func appendLog(t *testing.T, path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

// killChild runs this test binary as the crash child that env names
// (env=dir), with its own op log in a fresh test directory (and TMPDIR
// there: a child killed mid-write leaves nothing in /tmp), kills it after
// wait, and returns the log's path and what the child wrote to stderr.
func killChild(t *testing.T, env, dir string, seed uint64, wait time.Duration) (logPath, stderr string) {
	t.Helper()
	logPath = filepath.Join(t.TempDir(), "ops.log")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Dir(logPath), env+"="+dir, "KVFS_CRASH_LOG="+logPath, fmt.Sprintf("KVFS_CRASH_SEED=%d", seed))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Half the kills count their wait from the child's first logged
	// operation, not its start: on a loaded machine a child can take
	// longer than the wait to open the store, and a run of kills then
	// hit nothing but the opening (CI: "no file evicted in any run").
	if seed%2 == 1 {
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(5 * time.Millisecond) {
			if fi, err := os.Stat(logPath); err == nil && fi.Size() > 0 {
				break
			}
		}
	}
	time.Sleep(wait)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	return logPath, errb.String()
}
