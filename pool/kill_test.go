package pool_test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// TestKillMidPublish: a publisher process is SIGKILLed at random moments
// (mid-upload, between its name and its key's removal, anywhere), round
// after round. After each kill no name points to a missing object, and
// every file it reported published reads back; once its lease expired,
// another host's collection reclaims everything the killed publishes
// left (no unreachable object remains) and everything published stays
// readable.
func TestKillMidPublish(t *testing.T) {
	s := startServices(t)
	b := s.host(t, s.config(t, ""))
	r := rand.New(rand.NewPCG(5, 5))
	published := map[string]uint64{}
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = os.Environ()
		for k, v := range s.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Env = append(cmd.Env, fmt.Sprintf("KVFS_POOL_CHILD=kill/%d", round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		done := make(chan struct{})
		first := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for n := 0; sc.Scan(); {
				f := strings.Fields(sc.Text())
				if len(f) == 3 && f[0] == "published" {
					seed, _ := strconv.ParseUint(f[2], 10, 64)
					mu.Lock()
					published[f[1]] = seed
					mu.Unlock()
					if n++; n == 1 {
						close(first)
					}
				}
			}
		}()
		// The kill comes at a random moment after the child's first
		// publish, so that a slow start (the race detector, a loaded
		// machine) still leaves each round something published and a
		// publish in flight to kill.
		select {
		case <-first:
		case <-done:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the publisher published nothing in 2 minutes\n%s", round, stderr.String())
		}
		time.Sleep(time.Duration(r.IntN(800)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: the publisher ended before it was killed: %v\n%s", round, err, stderr.String())
		}
		checkNames(t, b)
	}
	mu := len(published)
	if mu < 6 {
		t.Fatalf("only %d files published in 6 rounds", mu)
	}
	for name, seed := range published {
		readBack(t, b, name, childFile(seed))
	}
	// Once the killed publishers' leases expired (2 s), a collection
	// reclaims what they left; nothing unreachable remains.
	time.Sleep(3 * time.Second)
	st, err := b.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files published across 6 kills; collection: %+v", len(published), st)
	all, err := objectCount(s)
	if err != nil {
		t.Fatal(err)
	}
	if all != st.LiveObjects {
		t.Fatalf("after the collection: %d objects in the pool, %d reachable", all, st.LiveObjects)
	}
	for name, seed := range published {
		readBack(t, b, name, childFile(seed))
	}
}

// checkNames opens every name in the pool: none may point to a missing
// object.
func checkNames(t testing.TB, p *pool.Pool) {
	t.Helper()
	names, err := p.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := p.Open(ctx, n); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("name %s points to a missing object: %v", n, err)
			}
			t.Fatal(err)
		}
	}
}

// objectCount counts the pool's objects (files under versitygw's bucket
// directory).
func objectCount(s *services) (int, error) {
	n := 0
	for _, dir := range []string{"packs", "manifests"} {
		ents, err := os.ReadDir(s.dir + "/s3/kvfs/pool/" + dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		for _, e := range ents {
			if !e.IsDir() {
				n++
			}
		}
	}
	return n, nil
}
