//go:build linux

package tests

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPoolMountKillDuringPublish (issue 26, item 4): daemon A of a pool
// mount SIGKILLs itself ($KVFS_TEST_CRASH_AT, pool/crashpoint.go) at an
// exact point of the publish of a file at its fsync or close: with the
// publish key written and nothing uploaded; with the pack uploaded and
// the manifest not; with the manifest uploaded and the name not written;
// with the name written and close not yet told; and between the uploads
// of a file's two packs. After each kill A is
// mounted again on the same directory: every file whose fsync and close
// returned reads byte-identical through A and through mount B; the file
// whose publish was killed is absent or whole, never a part or other
// bytes. Then kvfs gc --pool --dry-run finds no name pointing to a
// missing manifest, a collection runs, and every name the pool holds
// reads back as written, through kvfs pool get (no cache), and no
// object is left that no name reaches. The killed file, when absent, can
// be written again at once (O_EXCL): the mount revokes its dead
// predecessor's etcd lease, and its claim on the name with it (it was
// EEXIST for the lease's 10 s).
func TestPoolMountKillDuringPublish(t *testing.T) {
	env, svc := poolServices(t)
	b := poolMount(t, env, "b")
	dir := t.TempDir()
	host, mnt := filepath.Join(dir, "host-a"), filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	r := rand.New(rand.NewPCG(26, 4))
	written := map[string][]byte{} // files whose fsync and close returned
	killed := map[string][]byte{}  // files whose publish was killed
	mountA := func(extra ...string) {
		t.Helper()
		if code, out, errOut := poolKvfs(t, append(env[:len(env):len(env)], extra...), "mount", host, mnt); code != 0 {
			t.Fatalf("mount A: exit %d\n%s%s", code, out, errOut)
		}
	}
	defer func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(host, "kvfs.log"))
			t.Logf("daemon A's log:\n%s", lastLines(log, 30))
		}
		poolKvfs(t, env, "unmount", mnt)
	}()
	check := func(stage string) {
		t.Helper()
		for name, data := range written {
			for _, m := range []string{mnt, b} {
				err := sameBytes(filepath.Join(m, name), data, 1)
				// B may have cached the name's absence (the check of
				// a killed file, before its rewrite) for the mount's
				// timeout, 1 s: a name another host publishes shows
				// within it, not at once.
				for end := time.Now().Add(3 * time.Second); m == b && errors.Is(err, fs.ErrNotExist) && time.Now().Before(end); {
					time.Sleep(100 * time.Millisecond)
					err = sameBytes(filepath.Join(m, name), data, 1)
				}
				if err != nil {
					t.Fatalf("after the kill at %s: %s, whose close returned: %v", stage, name, err)
				}
			}
		}
		for name, data := range killed {
			for _, m := range []string{mnt, b} {
				got, err := os.ReadFile(filepath.Join(m, name))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil || string(got) != string(data) {
					t.Fatalf("after the kill at %s: %s, whose publish was killed, reads %d bytes (of %d), %v", stage, name, len(got), len(data), err)
				}
			}
		}
	}
	stages := []struct {
		at  string
		nth int
	}{{"begun", 2}, {"pack", 2}, {"packs", 3}, {"manifest", 4}, {"named", 3}}
	present := map[string]bool{}
	for _, s := range stages {
		mountA(fmt.Sprintf("KVFS_TEST_CRASH_AT=%s:%d", s.at, s.nth))
		var last string
		for i := 0; ; i++ {
			name := fmt.Sprintf("%s-f%d.mlxkv", s.at, i)
			size := 2<<20 + r.IntN(3<<20)
			if s.at == "pack" && i == 1 {
				size = 33<<20 + r.IntN(4<<20) // two packs: killed between their uploads
			}
			data := make([]byte, size)
			crand.Read(data)
			var err error
			if i%2 == 0 { // published at the fsync
				err = writeSynced(filepath.Join(mnt, name), data, r, 700_000)
			} else { // published at the close
				err = writeClosed(filepath.Join(mnt, name), data, r, 700_000)
			}
			if err != nil {
				if i != s.nth-1 {
					t.Fatalf("kill at %s:%d: file %d failed: %v", s.at, s.nth, i, err)
				}
				killed[name], last = data, name
				break
			}
			written[name] = data
			if i > s.nth {
				t.Fatalf("the daemon did not die at %s:%d", s.at, s.nth)
			}
		}
		exec.Command("umount", "-l", mnt).Run()
		mountA()
		check(s.at)
		_, err := os.Stat(filepath.Join(b, last))
		present[s.at] = err == nil
		if !present[s.at] {
			// The engine writes it again: the killed publish's
			// reservation of the name must not refuse it.
			data := make([]byte, 1<<20+r.IntN(1<<20))
			crand.Read(data)
			start := time.Now()
			if err := writeSynced(filepath.Join(mnt, last), data, r, 700_000); err != nil {
				t.Fatalf("after the kill at %s, writing %s again: %v (after %v)", s.at, last, err, time.Since(start))
			}
			delete(killed, last)
			written[last] = data
		}
		if code, out, errOut := poolKvfs(t, env, "unmount", mnt); code != 0 {
			t.Fatalf("unmount A: exit %d\n%s%s", code, out, errOut)
		}
	}
	if log, _ := os.ReadFile(filepath.Join(host, "kvfs.log")); strings.Contains(string(log), "not revoked") {
		t.Fatalf("daemon A's log:\n%s", lastLines(log, 20))
	}
	t.Logf("%d files whose close returned read back; the killed file is present after a kill at: %v", len(written), present)

	pool := envValue(env, "KVFS_POOL")
	code, out, errOut := poolKvfs(t, env, "gc", "--pool", pool, "--dry-run")
	if code != 0 || strings.Contains(errOut, "missing") {
		t.Fatalf("gc --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = poolKvfs(t, env, "gc", "--pool", pool, "--grace", "1ns"); code != 0 || strings.Contains(errOut, "missing") {
		t.Fatalf("gc: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("gc: %s", strings.TrimSpace(out))
	// The killed daemons' leases went when A was mounted again: what
	// their publishes uploaded is collected at once.
	var live int
	if _, err := fmt.Sscanf(out[strings.Index(out, ": ")+2:], "%d names, %d objects live", new(int), &live); err != nil {
		t.Fatalf("gc output %q: %v", out, err)
	}
	objects := 0
	for _, d := range []string{"packs", "manifests"} {
		ents, _ := os.ReadDir(filepath.Join(svc, "s3", "kvfs", "pool", d))
		objects += len(ents)
	}
	if objects != live {
		t.Fatalf("after the collection: %d objects in the pool, %d reachable\n%s", objects, live, out)
	}
	code, ls, errOut := poolKvfs(t, env, "pool", "ls")
	if code != 0 {
		t.Fatalf("pool ls: %s", errOut)
	}
	names := strings.Fields(ls)
	for _, n := range names {
		want, ok := written[n]
		if !ok {
			if want, ok = killed[n]; !ok {
				t.Fatalf("the pool holds %s, which no one wrote", n)
			}
		}
		got := filepath.Join(t.TempDir(), "got")
		if code, _, errOut := poolKvfs(t, env, "pool", "get", n, got); code != 0 {
			t.Fatalf("pool get %s after the collection: %s", n, errOut)
		}
		if b, _ := os.ReadFile(got); string(b) != string(want) {
			t.Fatalf("pool get %s after the collection: %d bytes, not the %d written", n, len(b), len(want))
		}
	}
	for n := range written {
		if !strings.Contains("\n"+ls, "\n"+n+"\n") {
			t.Fatalf("%s, whose close returned, is not in the pool after the collection", n)
		}
	}
	t.Logf("after the collection: %d names, all read back", len(names))
}

// writeClosed is writeSynced without the fsync: the close publishes.
func writeClosed(path string, data []byte, r *rand.Rand, maxPiece int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	for off := 0; off < len(data); {
		n := min(len(data)-off, 1+r.IntN(maxPiece))
		if _, err := f.Write(data[off : off+n]); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		off += n
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}
