package store_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

// The shared-pack crash test runs a child process (this test binary,
// dispatched by TestMain) in which several goroutines commit small files
// at once into the same few shared packs — new versions through Put and
// through a spool (the mount's path), and removals — logging each
// operation before it starts ("B g name k") and after it returns ("E …" or
// "F …"). Packs are small, so that they fill, close and die while others
// are appended to. The parent SIGKILLs the child at random moments; after
// each kill it opens the store, checks its invariants, and checks that
// every file is the version of its last completed operation or of the one
// in flight: no committed file is lost, nothing else appears.

const sharedCrashEnv = "KVFS_SHARED_CRASH_CHILD"

const (
	sharedCrashWriters   = 6
	sharedCrashNames     = 4 // per writer
	sharedCrashPackBytes = 256 << 10
)

// sharedCrashContent is version k of name: 4–64 KiB, half of the time
// content that other names hold too.
func sharedCrashContent(name string, k int) []byte {
	h := fnv.New64a()
	fmt.Fprint(h, name, k)
	seed := h.Sum64()
	if k%2 == 0 {
		seed = uint64(k % 7)
	}
	return randBytes(4096+int(seed%(60<<10)), seed)
}

func sharedCrashChild(dir, logPath, seed string) {
	n, _ := strconv.ParseUint(seed, 10, 64)
	var s *store.Store
	var err error
	for i := 0; i < 100; i++ {
		if s, err = store.Open(dir, store.Options{LockTimeout: 2 * time.Second, PackBytes: sharedCrashPackBytes}); err == nil {
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
	var wg sync.WaitGroup
	for g := 0; g < sharedCrashWriters; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(n, uint64(g)))
			for i := 0; ; i++ {
				name := fmt.Sprintf("g%d-%d", g, r.IntN(sharedCrashNames))
				k := int(n%1_000_000)*100_000 + i*sharedCrashWriters + g // unique across runs, nearly
				if r.IntN(8) == 0 {
					k = -1 // remove
				}
				// One write each, so that lines of writers do not mix.
				log.WriteString(fmt.Sprintf("B %s %d\n", name, k))
				err := sharedCrashOp(s, name, k, r.IntN(2) == 0)
				if err != nil {
					log.WriteString(fmt.Sprintf("F %s %d\n", name, k))
				} else {
					log.WriteString(fmt.Sprintf("E %s %d\n", name, k))
				}
			}
		}()
	}
	wg.Wait()
}

// sharedCrashOp applies version k of name (k < 0: removes it): a put, or a
// new version committed from a spool as the mount commits.
func sharedCrashOp(s *store.Store, name string, k int, spool bool) error {
	path := "d/" + name
	if k < 0 {
		err := s.Remove(path)
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	b := sharedCrashContent(name, k)
	fi, err := s.Stat(path)
	if !spool || err != nil {
		_, _, err := s.Put(context.Background(), bytes.NewReader(b), int64(len(b)), path, store.PutOptions{})
		return err
	}
	sp, err := os.CreateTemp(filepath.Join(s.Dir(), "spool"), "w-")
	if err != nil {
		return err
	}
	defer sp.Close()
	defer os.Remove(sp.Name())
	if _, err := sp.Write(b); err != nil {
		return err
	}
	_, _, err = s.CommitIno(context.Background(), fi.Ino, sp, int64(len(b)), store.CommitOptions{Adopt: true})
	return err
}

// TestCrashSharedPacks: see sharedCrashChild.
func TestCrashSharedPacks(t *testing.T) {
	kills := 40
	if testing.Short() {
		kills = 12
	}
	dir := filepath.Join(t.TempDir(), "store")
	if err := store.Init(dir, 4096); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	known := map[string]int{} // each name's version (absent: no file)
	var committed, inFlight int
	for run := 0; run < kills; run++ {
		logPath := filepath.Join(t.TempDir(), "ops.log")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Dir(logPath), sharedCrashEnv+"="+dir, "KVFS_CRASH_LOG="+logPath, fmt.Sprintf("KVFS_CRASH_SEED=%d", r.Uint64()))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(50+r.IntN(250)) * time.Millisecond)
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
		// Each name's candidates: its last completed version, and the
		// version in flight at the kill.
		done, pending := maps(known), map[string]int{}
		f, err := os.Open(logPath)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if f != nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) != 3 {
					continue // a line the kill cut short
				}
				k, _ := strconv.Atoi(fields[2])
				switch fields[0] {
				case "B":
					pending[fields[1]] = k
				case "E":
					committed++
					if k < 0 {
						delete(done, fields[1])
					} else {
						done[fields[1]] = k
					}
					delete(pending, fields[1])
				case "F":
					delete(pending, fields[1])
				}
			}
			f.Close()
		}
		for g := 0; g < sharedCrashWriters; g++ {
			for j := 0; j < sharedCrashNames; j++ {
				name := fmt.Sprintf("g%d-%d", g, j)
				var got []byte
				fi, err := s.Stat("d/" + name)
				if err == nil {
					got = get(t, s, "d/"+name)
				}
				matches := func(k int, ok bool) bool {
					if !ok || k < 0 {
						return fi == nil
					}
					return fi != nil && bytes.Equal(got, sharedCrashContent(name, k))
				}
				k, ok := done[name]
				p, inFlightOK := pending[name]
				switch {
				case matches(k, ok):
					if ok {
						known[name] = k
					} else {
						delete(known, name)
					}
				case inFlightOK && matches(p, true):
					inFlight++
					if p < 0 {
						delete(known, name)
					} else {
						known[name] = p
					}
				default:
					s.Close()
					t.Fatalf("run %d: %s (%d bytes, present %v) is neither its last committed version %d (%v) nor the one in flight %d (%v)",
						run, name, len(got), fi != nil, k, ok, p, inFlightOK)
				}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills, %d operations completed, %d found done that were in flight", kills, committed, inFlight)
	if committed == 0 {
		t.Fatal("no operation completed before a kill: the test tests nothing")
	}
}
