package pool_test

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/kvfs/kvfs/pool"
)

// TestEvict: a collection with a capacity removes names least recently
// used first (a use is a publish or an open, by any host, and moves with
// a rename) until what the names reach fits, never a name used within
// MinIdle, and its sweep then deletes their objects. A dry run removes
// nothing. The names kept read the same.
func TestEvict(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	b := s.host(t, s.config(t, ""))
	const size = 256 << 10 // four chunks; each file its own pack
	files := map[string][]byte{}
	for i, name := range []string{"f1", "f2", "f3", "f4"} {
		files[name] = randBytes(size, uint64(30+i))
		if err := a.Publish(ctx, name, bytes.NewReader(files[name]), size); err != nil {
			t.Fatal(err)
		}
	}
	// f1 is opened through b, then renamed: its use moves with it, so
	// f2 and f3 are now the least recently used.
	if _, err := b.Open(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Rename(ctx, "f1", "g1"); err != nil {
		t.Fatal(err)
	}
	files["g1"] = files["f1"]
	delete(files, "f1")

	opts := pool.CollectOptions{Grace: time.Nanosecond, Capacity: 2 * size, DryRun: true}
	st, err := a.Collect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Evict; e.Names != 2 || e.LiveBefore != 4*size || e.LiveAfter != 2*size {
		t.Fatalf("dry run: %+v, want 2 names to evict, 4 → 2 files' bytes", e)
	}
	for name := range files {
		if _, err := a.Stat(ctx, name); err != nil {
			t.Fatalf("a dry run removed %s: %v", name, err)
		}
	}
	opts.DryRun = false
	if st, err = a.Collect(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Logf("evict: %+v", st)
	if e := st.Evict; e.Names != 2 || e.LiveAfter != 2*size || e.Recent != 0 || e.Changed != 0 {
		t.Fatalf("evict: %+v, want f2 and f3 evicted", e)
	}
	for _, gone := range []string{"f2", "f3"} {
		if _, err := a.Stat(ctx, gone); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s after eviction: %v, want it gone (least recently used)", gone, err)
		}
		delete(files, gone)
	}
	if got, _ := packBytes(t, s); got != 2*size {
		t.Fatalf("pack bytes after eviction and sweep: %d, want %d", got, 2*size)
	}
	for name, want := range files {
		checkFile(t, b, name, want, 3)
	}

	// Over capacity, but everything was used within MinIdle: nothing goes.
	opts.Capacity, opts.MinIdle = 1, time.Hour
	if st, err = a.Collect(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if e := st.Evict; e.Names != 0 || e.Recent != 2 {
		t.Fatalf("evict within MinIdle: %+v, want none evicted, 2 recent", e)
	}
	for name, want := range files {
		checkFile(t, a, name, want, 4)
	}

	// A name published again between eviction's reading and its removal
	// stays; so does one opened (used) in between.
	opts.MinIdle = 0
	a.BeforeEvict(func(path string) {
		switch path {
		case "f4":
			if err := b.Publish(ctx, path, bytes.NewReader(files[path]), size); err != nil {
				t.Error(err)
			}
		case "g1":
			b2 := s.host(t, s.config(t, "")) // a host that has not used it within touchEvery
			if _, err := b2.Open(ctx, path); err != nil {
				t.Error(err)
			}
		}
	})
	if st, err = a.Collect(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if e := st.Evict; e.Names != 0 || e.Changed != 2 {
		t.Fatalf("evict racing a publish and an open: %+v, want both names kept", e)
	}
	for name, want := range files {
		checkFile(t, a, name, want, 5)
	}
}

// TestEvictKeepsSeen: a name another host saw exist (a lookup: Saw) counts
// as used, so eviction passes over it within MinIdle: an engine that found
// a block's name lists it in the manifest it publishes last. A name nobody
// saw goes.
func TestEvictKeepsSeen(t *testing.T) {
	s := startServices(t)
	a := s.host(t, s.config(t, ""))
	const size = 64 << 10
	for i, name := range []string{"blocks/seen", "blocks/unseen"} {
		if err := a.Publish(ctx, name, bytes.NewReader(randBytes(size, uint64(50+i))), size); err != nil {
			t.Fatal(err)
		}
	}
	const minIdle = 2 * time.Second
	time.Sleep(minIdle + time.Second) // both published (used) longer ago
	b := s.host(t, s.config(t, ""))   // a host that has recorded no use of either
	b.Saw("blocks/seen")
	opts := pool.CollectOptions{Grace: time.Nanosecond, Capacity: 1, MinIdle: minIdle}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The sighting is recorded in the background: a dry run shows
		// when it has landed.
		opts.DryRun = true
		st, err := a.Collect(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if st.Evict.Recent == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sighting was not recorded within 10 s: %+v", st.Evict)
		}
		time.Sleep(100 * time.Millisecond)
	}
	opts.DryRun = false
	var names int
	var st pool.CollectStats
	for try := 0; ; try++ {
		var err error
		st, err = a.Collect(ctx, opts)
		if err != nil && strings.Contains(err.Error(), "stopped deleting") && try < 5 {
			// The collector stops deleting when its lease (2 s here)
			// has less than half its time left: the safe answer to a
			// late keepalive on a loaded machine. It goes on where it
			// stopped.
			t.Logf("collect %d: %v", try, err)
			names += st.Evict.Names
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		names += st.Evict.Names
		break
	}
	if e := st.Evict; names != 1 || e.Recent != 1 {
		t.Fatalf("evict: %+v (%d names in all), want the unseen name evicted and the seen one kept", e, names)
	}
	if _, err := a.Stat(ctx, "blocks/seen"); err != nil {
		t.Fatalf("the name seen was evicted: %v", err)
	}
	if _, err := a.Stat(ctx, "blocks/unseen"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the name nobody saw: %v, want it evicted", err)
	}
}
