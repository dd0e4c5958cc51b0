//go:build linux

package tests

// The pool mount gives what a local filesystem (and the single-host mount)
// gives, or a refusal where the pool cannot: empty files, files before
// their first publish, O_EXCL across hosts, modes, damaged cache chunks,
// lying manifests, renames during close. Each test failed on the code red
// team 23 attacked (7cba1b1).

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An empty file created and closed (touch, O_EXCL lock files, markers)
// must exist afterwards, here and on the other host (finding 1).
func TestPoolMountEmptyFileIsPublished(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	fd, err := syscall.Open(filepath.Join(a, "empty"), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fsync(fd); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if err := syscall.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(a, "empty")); err != nil {
		t.Errorf("host a, after close: %v", err)
	}
	waitFor(t, "the empty file on host b", func() error {
		_, err := os.Stat(filepath.Join(b, "empty"))
		return err
	})
}

// A file being written is readable by its name on the host that writes
// it (stat says it exists with its size), and can be renamed and removed
// before its first publish (finding 2).
func TestPoolMountWrittenFileBeforePublish(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	p := filepath.Join(a, "new")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "0123456789" {
		t.Errorf("read before publish: %q, %v", b, err)
	}
	if err := os.Rename(p, p+".renamed"); err != nil {
		t.Errorf("rename before publish: %v", err)
	}
}

// O_EXCL is exclusive across the hosts of a pool: two hosts creating the
// same name at once cannot both succeed (finding 4).
func TestPoolMountExclAcrossHosts(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	both := 0
	for i := range 10 {
		name := "lock" + string(rune('0'+i))
		errs := make(chan error, 2)
		for _, m := range []string{a, b} {
			go func() {
				f, err := os.OpenFile(filepath.Join(m, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					f.Write([]byte(m))
					err = f.Close()
				}
				errs <- err
			}()
		}
		e1, e2 := <-errs, <-errs
		if e1 == nil && e2 == nil {
			both++
		} else if e1 != nil && e2 != nil {
			t.Errorf("%s: both failed: %v, %v", name, e1, e2)
		} else if err := errors.Join(e1, e2); !errors.Is(err, os.ErrExist) {
			t.Errorf("%s: %v, want EEXIST", name, err)
		}
	}
	if both > 0 {
		t.Errorf("O_EXCL create succeeded on both hosts for %d of 10 names", both)
	}
}

// A file's owner and mode are kept with its name in the pool (issue 30):
// a create 0600 is 0600 on every host, not silently turned into 0644 that
// lets every user of an allow_other mount read the file (finding 5); a
// chmod and a chown are kept and move with a rename, and a file written
// again keeps them.
func TestPoolMountModeKept(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a", "-o", "allow_other")
	b := poolMount(t, env, "b")
	mode := func(mnt, name string) (os.FileMode, uint32, error) {
		fi, err := os.Stat(filepath.Join(mnt, name))
		if err != nil {
			return 0, 0, err
		}
		return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid, nil
	}
	// A create 0600 is kept, on the writing host and on another.
	if err := os.WriteFile(filepath.Join(a, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, _, err := mode(a, "secret"); err != nil || m != 0o600 {
		t.Fatalf("create 0600: the mode is %v, %v", m, err)
	}
	waitFor(t, "secret 0600 on b", func() error {
		if m, _, err := mode(b, "secret"); err != nil || m != 0o600 {
			return fmt.Errorf("mode %v, %v", m, err)
		}
		return nil
	})
	// A chmod and a chown are kept, and move with a rename.
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(a, "f"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(a, "f"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "g 0640 of 1234 on b", func() error {
		if m, uid, err := mode(b, "g"); err != nil || m != 0o640 || uid != 1234 {
			return fmt.Errorf("mode %v uid %d, %v", m, uid, err)
		}
		return nil
	})
	// A chmod on one host is not undone by another host writing the
	// file again (its view of the mode is older).
	if err := os.Chmod(filepath.Join(b, "g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "g"), []byte("written again"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "g written again, still 0600 of 1234, on b", func() error {
		got, err := os.ReadFile(filepath.Join(b, "g"))
		if m, uid, serr := mode(b, "g"); err != nil || serr != nil || string(got) != "written again" || m != 0o600 || uid != 1234 {
			return fmt.Errorf("%q mode %v uid %d, %v %v", got, m, uid, err, serr)
		}
		return nil
	})
	// A file published without an owner (kvfs pool put) is the
	// daemon's, 0644.
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("put"), 0o600)
	if code, out, errOut := poolKvfs(t, env, "pool", "put", src, "put"); code != 0 {
		t.Fatalf("kvfs pool put: exit %d %s%s", code, out, errOut)
	}
	waitFor(t, "put on b", func() error {
		if m, uid, err := mode(b, "put"); err != nil || m != 0o644 || uid != uint32(os.Getuid()) {
			return fmt.Errorf("mode %v uid %d, %v", m, uid, err)
		}
		return nil
	})
}

// A chunk file of the host's cache damaged on disk while the daemon runs
// is never served (finding 13): the read is EIO or the right bytes. Also
// with --verify, which the pool mount accepts.
func TestPoolMountDamagedCacheChunk(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b", "--verify")
	want := make([]byte, 3<<20-5)
	crand.Read(want)
	if err := os.WriteFile(filepath.Join(a, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "f on b", func() error {
		got, err := os.ReadFile(filepath.Join(b, "f"))
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("b read %d wrong bytes", len(got))
		}
		return err
	})
	sum := poolChunks(t, want)[0].Sum
	cf := filepath.Join(filepath.Dir(b), "host-b", "cache", hex.EncodeToString(sum[:]))
	var c []byte
	waitFor(t, "chunk 0 in b's cache (written in the background)", func() (err error) {
		c, err = os.ReadFile(cf)
		return err
	})
	c[5000] ^= 0xff
	if err := os.WriteFile(cf, c, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // a new lookup: no kernel page cache, no open file's last chunk
	got, err := os.ReadFile(filepath.Join(b, "f"))
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("b read wrong bytes from a damaged cache chunk (no error)")
	}
}

// A manifest that lies about where a chunk is (another host's bug, or a
// hostile writer) must not make an honest host's later publish of that
// chunk unreadable (finding 14).
func TestPoolMountDedupPoisoning(t *testing.T) {
	env, svc := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	other := make([]byte, 1<<20)
	crand.Read(other)
	if err := os.WriteFile(filepath.Join(a, "other"), other, 0o644); err != nil {
		t.Fatal(err)
	}
	var pack string
	filepath.WalkDir(filepath.Join(svc, "s3", "kvfs", "pool", "packs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			pack = d.Name()
		}
		return nil
	})
	if pack == "" {
		t.Fatal("no pack object found")
	}
	victim := make([]byte, 2<<20)
	crand.Read(victim)
	// The poison claims victim's first chunk (as the pool cuts it) lies
	// in other's pack.
	z := poolChunks(t, victim)[0]
	m, _ := json.Marshal(map[string]any{"v": 2, "size": z.Len,
		"chunks": []map[string]any{{"sum": hex.EncodeToString(z.Sum[:]), "pack": pack, "off": 0, "len": z.Len}}})
	mh := sha256.Sum256(m)
	mname := hex.EncodeToString(mh[:])
	// versitygw's POSIX backend serves the files of its directory.
	if err := os.WriteFile(filepath.Join(svc, "s3", "kvfs", "pool", "manifests", mname), m, 0o644); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{envValue(env, "KVFS_ETCD")}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "kvfs/kvfs/pool/#/names/poison", mname); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "poison listed on a", func() error { _, err := os.Stat(filepath.Join(a, "poison")); return err })
	if err := os.WriteFile(filepath.Join(a, "victim"), victim, 0o644); err != nil {
		t.Fatalf("publish of victim: %v", err)
	}
	waitFor(t, "victim on b", func() error { _, err := os.Stat(filepath.Join(b, "victim")); return err })
	got, err := os.ReadFile(filepath.Join(b, "victim"))
	if err != nil || !bytes.Equal(got, victim) {
		t.Fatalf("victim, published with close returning 0, reads back as %d bytes, %v", len(got), err)
	}
}

// A rename of a file whose close is publishing it moves the whole file:
// the new name must not keep the older (fsynced, partial) version while
// the old name comes back with the whole file (finding 15).
func TestPoolMountRenameDuringClose(t *testing.T) {
	env, _ := poolServices(t)
	a := poolMount(t, env, "a")
	b := poolMount(t, env, "b")
	bad := 0
	for i := range 4 {
		want := make([]byte, 40<<20+3)
		crand.Read(want)
		tmp := filepath.Join(a, "snap.tmp")
		f, err := os.Create(tmp)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(want[:1<<20])
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Write(want[1<<20:])
		done := make(chan error, 1)
		go func() { done <- f.Close() }()
		time.Sleep(time.Duration(50+100*i) * time.Millisecond)
		final := filepath.Join(a, "snap"+string(rune('0'+i)))
		if err := os.Rename(tmp, final); err != nil {
			t.Fatalf("rename: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("close: %v", err)
		}
		time.Sleep(1500 * time.Millisecond)
		got, err := os.ReadFile(filepath.Join(b, "snap"+string(rune('0'+i))))
		_, terr := os.Stat(filepath.Join(b, "snap.tmp"))
		if err != nil || !bytes.Equal(got, want) || terr == nil {
			bad++
			t.Logf("round %d: final %d of %d bytes (%v); old name still there: %v", i, len(got), len(want), err, terr == nil)
			os.Remove(filepath.Join(a, "snap.tmp"))
		}
	}
	if bad > 0 {
		t.Errorf("%d of 4 renames during close left the new name with a stale version", bad)
	}
}
