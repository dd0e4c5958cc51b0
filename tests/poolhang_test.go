//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPoolMountServicesHang (issue 26): with the S3 server hung (SIGSTOP:
// connections accepted and never answered), a file host B has read reads
// through B's mount at the cache's speed, not after --pool-timeout; a file
// B has not read fails after at most one timeout and then at once, and
// reads once S3 is back. The same with etcd hung, for a file B has read
// and one it never looked up. The /.kvfs tree answers as the files do
// (a whole view of a file B has read, the stats). B's log says once per
// service that its circuit opened, and once that it closed.
func TestPoolMountServicesHang(t *testing.T) {
	env, svc := poolServices(t)
	// A cached read is timed against a bound far below the timeout: a
	// read that waits on a hung service takes at least the timeout; one
	// served from the cache takes milliseconds (more under -race, on a
	// loaded machine).
	const timeout, fast = 5 * time.Second, 2 * time.Second
	signal := func(which string, sig syscall.Signal) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(svc, which+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("%v to %s: %v", sig, which, err)
		}
	}
	pause := func(which string) {
		t.Helper()
		signal(which, syscall.SIGSTOP)
		t.Cleanup(func() { signal(which, syscall.SIGCONT) }) // before the services stop
		time.Sleep(1200 * time.Millisecond)                  // past the mount's entry timeout and listing
	}
	a := poolMount(t, env, "a", "--pool-timeout", timeout.String())
	b := poolMount(t, env, "b", "--pool-timeout", timeout.String())
	seen, unseen := psVersion(7, 3<<20+77), psVersion(8, 1<<20+5)
	engineWrite(t, filepath.Join(a, "seen"), seen, 1)
	engineWrite(t, filepath.Join(a, "unseen"), unseen, 2)
	waitFor(t, "seen through B", func() error { return sameBytes(filepath.Join(b, "seen"), seen, 3) })

	// timedRead reads a file whole (one open) within fast, then at
	// unaligned offsets.
	timedRead := func(what, name string, want []byte) {
		t.Helper()
		start := time.Now()
		got, err := os.ReadFile(filepath.Join(b, name))
		if d := time.Since(start); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %v (%d bytes, want %d)", what, err, len(got), len(want))
		} else if d > fast {
			t.Fatalf("%s: took %v (--pool-timeout %v): it waited on a hung service", what, d, timeout)
		} else {
			t.Logf("%s: %v", what, d.Round(time.Millisecond))
		}
		if err := sameBytes(filepath.Join(b, name), want, 4); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// failsFast reads a file that cannot be read now: an error within
	// fast (the circuit is open).
	failsFast := func(what, name string) {
		t.Helper()
		for i := range 3 {
			start := time.Now()
			if _, err := os.ReadFile(filepath.Join(b, name)); err == nil || time.Since(start) > fast {
				t.Fatalf("%s, read %d: %v after %v, want an error at once", what, i, err, time.Since(start))
			}
		}
	}

	// statsFast reads /.kvfs/stats within fast.
	statsFast := func(what string) {
		t.Helper()
		start := time.Now()
		if b, err := os.ReadFile(filepath.Join(b, ".kvfs", "stats")); err != nil || !bytes.Contains(b, []byte(`"names"`)) {
			t.Fatalf("%s: /.kvfs/stats: %q, %v", what, b, err)
		}
		if d := time.Since(start); d > fast {
			t.Fatalf("%s: /.kvfs/stats took %v", what, d)
		}
	}

	pause("s3")
	timedRead("read of a file B has read, S3 hung", "seen", seen)
	timedRead("its /.kvfs/whole view, S3 hung", ".kvfs/whole/seen", seen)
	statsFast("S3 hung")
	start := time.Now()
	if _, err := os.ReadFile(filepath.Join(b, "unseen")); err == nil {
		t.Fatal("read of a file B has not read, S3 hung: no error")
	}
	if d := time.Since(start); d > timeout+2*time.Second {
		t.Fatalf("read of a file B has not read, S3 hung: failed after %v", d)
	}
	failsFast("a file B has not read, S3's circuit open", "unseen")
	timedRead("read of a file B has read, S3's circuit open", "seen", seen)
	signal("s3", syscall.SIGCONT)
	waitFor(t, "the file B had not read, S3 back", func() error { return sameBytes(filepath.Join(b, "unseen"), unseen, 5) })

	// etcd: a file B has read reads by name at the cache's speed; a file
	// B has never looked up fails (within one timeout, and then at once,
	// once the circuit is open); all of it reads once etcd is back.
	fresh := psVersion(10, 1<<20+9)
	engineWrite(t, filepath.Join(a, "fresh"), fresh, 6)
	pause("etcd")
	timedRead("read of a file B has read, etcd hung", "seen", seen)
	timedRead("read again, etcd hung", "seen", seen)
	timedRead("its /.kvfs/whole view, etcd hung", ".kvfs/whole/seen", seen)
	statsFast("etcd hung")
	start = time.Now()
	if _, err := os.ReadFile(filepath.Join(b, "fresh")); err == nil {
		t.Fatal("read of a file B never looked up, etcd hung: no error")
	}
	if d := time.Since(start); d > timeout+2*time.Second {
		t.Fatalf("read of a file B never looked up, etcd hung: failed after %v", d)
	}
	logB := filepath.Join(filepath.Dir(b), "host-b", "kvfs.log")
	waitFor(t, "etcd's circuit open in B's log", func() error {
		if log, _ := os.ReadFile(logB); strings.Count(string(log), "circuit open") != 2 {
			return fmt.Errorf("not yet:\n%s", lastLines(log, 10))
		}
		return nil
	})
	failsFast("a file B never looked up, etcd's circuit open", "fresh")
	timedRead("read of a file B has read, etcd's circuit open", "seen", seen)
	signal("etcd", syscall.SIGCONT)
	waitFor(t, "the file B had not looked up, etcd back", func() error { return sameBytes(filepath.Join(b, "fresh"), fresh, 7) })
	v2 := psVersion(9, 1<<20+3)
	waitFor(t, "a write after etcd is back", func() error { return os.WriteFile(filepath.Join(a, "later"), v2, 0o644) })
	waitFor(t, "the new file through B", func() error { return sameBytes(filepath.Join(b, "later"), v2, 8) })
	log, _ := os.ReadFile(logB)
	for _, want := range []string{"circuit open", "circuit closed"} {
		if n := strings.Count(string(log), want); n != 2 { // S3's, then etcd's
			t.Errorf("B's log says %q %d times, want twice (S3, etcd):\n%s", want, n, lastLines(log, 30))
		}
	}
}

// TestPoolMountSlowEtcdFindsNewNames: a lookup that etcd answers late
// (slower than the mount waits before it answers from its last listing)
// must not say ENOENT for a name published since that listing. CI met
// it: on a loaded machine a mount's listing came back after the 250 ms
// it waits, and a file another host had closed seconds before was
// missing. Here etcd is stopped for 1.5 s while B looks the new name
// up: the lookup waits for etcd, and finds it.
func TestPoolMountSlowEtcdFindsNewNames(t *testing.T) {
	env, svc := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	old, fresh := psVersion(11, 1<<20+3), psVersion(12, 2<<20+5)
	engineWrite(t, filepath.Join(a, "old"), old, 1)
	waitFor(t, "old through B", func() error { return sameBytes(filepath.Join(b, "old"), old, 2) })
	engineWrite(t, filepath.Join(a, "fresh"), fresh, 3)
	time.Sleep(1200 * time.Millisecond) // past B's entry timeout and listing

	pidText, err := os.ReadFile(filepath.Join(svc, "etcd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan struct{})
	go func() {
		time.Sleep(1500 * time.Millisecond)
		syscall.Kill(pid, syscall.SIGCONT)
		close(resumed)
	}()
	t.Cleanup(func() { <-resumed })
	start := time.Now()
	if err := sameBytes(filepath.Join(b, "fresh"), fresh, 4); err != nil {
		t.Fatalf("fresh through B, etcd stopped for 1.5 s: %v (after %v)", err, time.Since(start))
	}
	t.Logf("fresh through B, etcd stopped for 1.5 s: found after %v", time.Since(start).Round(time.Millisecond))
}
