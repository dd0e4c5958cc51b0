package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/testutil"
	"github.com/kvfs/kvfs/pool"
)

// TestCollectRacesPublishes: two hosts publish and remove files built
// from shared chunks (so publishes reuse what the other uploaded, and
// what a collection may be deleting) while a third collects with no
// grace period, over and over, at random moments, rewriting sparse packs
// as it goes (moving names the publishers are replacing); a goroutine
// beside each
// publisher revokes its etcd lease at random moments (an injected lease
// expiry, mid-publish or between). Throughout and at the end, every name reads back exactly what its last successful publish
// wrote, through a host without a cache: no live object was ever
// deleted. (A checker reads every name again and again meanwhile, so that
// an object deleted too early is seen before its name moves on.)
func TestCollectRacesPublishes(t *testing.T) {
	s := startServices(t)
	d := testutil.StressDuration(t, 30*time.Second)
	cfg := s.config(t, "")
	cfg.LeaseTTL = time.Second
	hosts := []*pool.Pool{s.host(t, cfg), s.host(t, cfg)}
	collector := s.host(t, cfg)
	checker := s.host(t, cfg)

	const chunk = 64 << 10
	bases := make([][]byte, 12)
	for i := range bases {
		bases[i] = randBytes(chunk, uint64(100+i))
	}
	type owner struct {
		mu   sync.Mutex
		want map[string][]byte
	}
	owners := []*owner{{want: map[string][]byte{}}, {want: map[string][]byte{}}}
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(k string) { mu.Lock(); counts[k]++; mu.Unlock() }
	// verify reads every name whole (quick, after each collection) or
	// also at random unaligned ranges (full, at the end).
	verify := func(full bool) {
		for i, o := range owners {
			o.mu.Lock()
			for name, want := range o.want {
				if full {
					checkFile(t, checker, name, want, uint64(i))
					continue
				}
				count("name read")
				f, err := checker.Open(ctx, name)
				if err != nil {
					t.Errorf("open %s after a collection: %v", name, err)
					continue
				}
				got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("read %s after a collection: %v (bytes equal: %v)", name, err, bytes.Equal(got, want))
				}
			}
			o.mu.Unlock()
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for h, host := range hosts {
		o := owners[h]
		wg.Add(2)
		go func() { // publishes and removes
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(h), 42))
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("h%d/%d", h, r.IntN(6))
				if r.IntN(5) == 0 {
					o.mu.Lock()
					if _, ok := o.want[name]; ok {
						if err := host.Remove(ctx, name); err != nil {
							t.Errorf("remove %s: %v", name, err)
						}
						delete(o.want, name)
						count("remove")
					}
					o.mu.Unlock()
					continue
				}
				var b []byte
				for range 2 + r.IntN(10) {
					b = append(b, bases[r.IntN(len(bases))]...)
				}
				b = append(b, randBytes(r.IntN(3*chunk), uint64(h<<32|seq))...)
				o.mu.Lock()
				err := host.Publish(ctx, name, bytes.NewReader(b), int64(len(b)))
				switch {
				case err == nil:
					o.want[name] = b
					count("publish")
				case errors.Is(err, pool.ErrLeaseLost):
					// Three lease losses in a row: it published nothing,
					// and the name keeps what it had.
					count("publish lost its lease three times")
				default:
					t.Errorf("publish %s: %v", name, err)
				}
				o.mu.Unlock()
			}
		}()
		go func() { // injects lease expiry
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(h), 7))
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(r.IntN(400)) * time.Millisecond):
				}
				host.RevokeLease()
				count("lease revoked")
			}
		}()
	}
	wg.Add(1)
	go func() { // checks what the names reach, again and again
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			verify(false)
			count("verify")
			time.Sleep(10 * time.Millisecond)
		}
	}()
	wg.Add(1)
	go func() { // collects
		defer wg.Done()
		r := rand.New(rand.NewPCG(9, 9))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.IntN(200)) * time.Millisecond):
			}
			start := time.Now()
			// Every collection also rewrites the packs that are at
			// least 30% dead (repack.go), moving names as the
			// publishers replace and remove them.
			st, err := collector.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond, Threshold: 0.3})
			took := time.Since(start)
			if err != nil && strings.Contains(err.Error(), "stopped deleting") {
				// The collector stops deleting when its lease has
				// less than half its TTL left (leaseCheck): the safe
				// answer to a late keepalive, which the race detector
				// and a loaded machine make likely at a TTL of 1 s.
				// What must hold holds anyway (verify).
				mu.Lock()
				counts["collect stopped for its lease"]++
				mu.Unlock()
				continue
			}
			if err != nil && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "context deadline exceeded")) {
				// An S3 or etcd call past its timeout (a loaded
				// machine): the collection stops where it was, which
				// must leave the pool whole as well (verify).
				mu.Lock()
				counts["collect timed out"]++
				mu.Unlock()
				continue
			}
			if err != nil {
				t.Errorf("collect: %v", err)
				continue
			}
			mu.Lock()
			counts["collect"]++
			counts["objects deleted"] += st.Deleted
			counts["packs rewritten"] += st.Repack.Packs
			counts["names moved by a rewrite"] += st.Repack.Names
			counts["names changed during a rewrite"] += st.Repack.Skipped
			counts["collect ms"] += int(took.Milliseconds())
			mu.Unlock()
		}
	}()
	// At least d, and on until every part of the race has happened (on
	// a loaded machine 3 s may hold no rewrite that moved a name), for at
	// most a minute more.
	time.Sleep(d)
	happened := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return counts["collect"] > 0 && counts["publish"] > 0 && counts["objects deleted"] > 0 && counts["names moved by a rewrite"] > 0
	}
	for deadline := time.Now().Add(time.Minute); !happened() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	verify(true)
	if _, err := collector.Collect(ctx, pool.CollectOptions{Grace: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	verify(true)
	t.Logf("%v", counts)
	if counts["collect"] == 0 || counts["publish"] == 0 || counts["objects deleted"] == 0 || counts["names moved by a rewrite"] == 0 {
		t.Fatalf("the race did not happen: %v", counts)
	}
}
