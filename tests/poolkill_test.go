//go:build linux

package tests

import (
	"bytes"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPoolMountKilledMidPublish: daemon A of a pool mount is SIGKILLed at
// a random moment while an engine writes snapshots through it (tmp,
// fsync, close, rename), three times. Every file whose rename returned
// reads byte-identical through mount B, no name in the pool points to a
// missing object, and once A's leases have expired, kvfs gc --pool leaves
// no object that no name reaches (A's orphans are reclaimed).
func TestPoolMountKilledMidPublish(t *testing.T) {
	env, svc := poolServices(t)
	b := poolMount(t, env, "b")
	written := map[string][]byte{}
	r := rand.New(rand.NewPCG(7, 7))
	for round := range 3 {
		dir := t.TempDir()
		host, mnt := filepath.Join(dir, "host"), filepath.Join(dir, "mnt")
		os.Mkdir(mnt, 0o755)
		if code, out, errOut := poolKvfs(t, env, "mount", host, mnt); code != 0 {
			t.Fatalf("mount A: exit %d\n%s%s", code, out, errOut)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				name := fmt.Sprintf("r%d-f%d", round, i)
				data := make([]byte, 3<<20+r.IntN(1<<20))
				crand.Read(data)
				if err := engineWriteErr(filepath.Join(mnt, name), data); err != nil {
					return // the daemon is gone
				}
				written[name] = data
			}
		}()
		time.Sleep(time.Duration(300+r.IntN(1500)) * time.Millisecond)
		out, err := exec.Command("pgrep", "-f", "kvfs mount --foreground .*"+regexp.QuoteMeta(host)).Output()
		pid, _ := strconv.Atoi(strings.Fields(string(out) + " 0")[0])
		if err != nil || pid <= 0 {
			t.Fatalf("find daemon A: %v", err)
		}
		syscall.Kill(pid, syscall.SIGKILL)
		<-done
		exec.Command("umount", "-l", mnt).Run()
	}
	if len(written) == 0 {
		t.Fatal("nothing was written before the kills")
	}
	for name, data := range written {
		if err := sameBytes(filepath.Join(b, name), data, 1); err != nil {
			t.Fatalf("%s, written before a kill, through B: %v", name, err)
		}
	}
	// A's leases (10 s) expire; then a collection reclaims what A left.
	time.Sleep(12 * time.Second)
	pool := envValue(env, "KVFS_POOL")
	code, out, errOut := poolKvfs(t, env, "gc", "--pool", pool, "--grace", "1ns")
	if code != 0 {
		t.Fatalf("gc: exit %d\n%s%s", code, out, errOut)
	}
	var names, live int
	if _, err := fmt.Sscanf(out[strings.Index(out, ": ")+2:], "%d names, %d objects live", &names, &live); err != nil {
		t.Fatalf("gc output %q: %v", out, err)
	}
	objects := 0
	for _, d := range []string{"packs", "manifests"} {
		ents, _ := os.ReadDir(filepath.Join(svc, "s3", "kvfs", "pool", d))
		objects += len(ents)
	}
	if objects != live {
		t.Fatalf("after the collection: %d objects in the pool, %d reachable from %d names\n%s", objects, live, names, out)
	}
	// Every name the pool holds opens (none points to a missing object).
	code, ls, errOut := poolKvfs(t, env, "pool", "ls")
	if code != 0 {
		t.Fatalf("pool ls: %s", errOut)
	}
	for _, n := range strings.Fields(ls) {
		if code, _, errOut := poolKvfs(t, env, "pool", "get", n, filepath.Join(t.TempDir(), "got")); code != 0 {
			t.Fatalf("pool get %s: %s", n, errOut)
		}
	}
	t.Logf("%d files written across 3 kills; %d names, %d objects, all reachable", len(written), names, objects)
}

// engineWriteErr writes data to final as the engine does (tmp, fsync,
// close, rename) and returns the first error.
func engineWriteErr(final string, data []byte) error {
	tmp := final + ".tmp"
	if err := writeSynced(tmp, data, nil, 0); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// TestPoolMountKeepsUnpublished: a file closed while etcd is down (it went
// down after the open) cannot
// be published: its close fails (after --pool-timeout), and its bytes are
// kept in the host's spool directory under a name that says so, with a
// log line that says how to publish them; once etcd is back, kvfs pool put
// of the kept file publishes it, and the mount reads it.
func TestPoolMountKeepsUnpublished(t *testing.T) {
	env, svc := poolServices(t)
	a := poolMount(t, env, "a", "--pool-timeout", "2s")
	host := filepath.Join(filepath.Dir(a), "host-a")
	services := func(args ...string) {
		t.Helper()
		script, _ := filepath.Abs("../scripts/services")
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "KVFS_SERVICES_DIR="+svc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/services %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	data := make([]byte, 2<<20+123)
	crand.Read(data)
	f, err := os.Create(filepath.Join(a, "x.mlxkv"))
	if err != nil {
		t.Fatal(err)
	}
	// Stopped after the open (which lists names), before the writes: the
	// services script's fork closes its copy of f at exec, a FLUSH that
	// publishes whatever was written by then.
	services("stop", "etcd")
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err == nil {
		t.Fatal("a file closed while etcd is down was reported written")
	}
	var kept string
	for deadline := time.Now().Add(20 * time.Second); kept == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(host, "spool", "unpublished-*-x.mlxkv"))
		if len(m) == 1 {
			if b, err := os.ReadFile(m[0]); err == nil && len(b) == len(data) {
				kept = m[0]
			}
		}
	}
	if kept == "" {
		log, _ := os.ReadFile(filepath.Join(host, "kvfs.log"))
		t.Fatalf("the bytes of the file were not kept in %s/spool\n%s", host, lastLines(log, 20))
	}
	if b, _ := os.ReadFile(kept); !bytes.Equal(b, data) {
		t.Fatal("the kept bytes differ from those written")
	}
	if log, _ := os.ReadFile(filepath.Join(host, "kvfs.log")); !strings.Contains(string(log), "kvfs pool put "+kept+" x.mlxkv") {
		t.Fatalf("the log does not say how to publish the kept file:\n%s", lastLines(log, 20))
	}
	services("start")
	if code, out, errOut := poolKvfs(t, env, "pool", "put", kept, "x.mlxkv"); code != 0 {
		t.Fatalf("pool put of the kept file: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, "the published file through the mount", func() error { return sameBytes(filepath.Join(a, "x.mlxkv"), data, 2) })
}
