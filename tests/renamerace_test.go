//go:build linux

package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvfs/kvfs/internal/testutil"
)

// TestOpenRacesReplacements: four writers replace one small file F in a
// tight loop (write a temporary file, rename it over F) while four
// readers open and read F. F always exists, so every open must succeed
// and read one whole version, however many times F is replaced between a
// reader's lookup and its open: the kernel retries an ESTALE open once,
// and a version replaced twice in that window used to fail the open (CI,
// TestReadWriteListStress). The lookup's lease (fs/filelease.go) keeps the
// version it found for the open. No version may stay behind as an orphan
// after the leases end.
func TestOpenRacesReplacements(t *testing.T) {
	m := newMount(t)
	d := testutil.StressDuration(t, 20*time.Second)
	version := func(w, i int) []byte {
		// A version is one byte value repeated, with its length varying,
		// so that a mix of two versions or a short read shows.
		return bytes.Repeat([]byte{byte(w*64 + i%64 + 1)}, 100+(w*997+i*31)%4000)
	}
	F := m.path("F")
	if err := os.WriteFile(F, version(0, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var writes, reads atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		stop.Store(true)
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tmp := m.path(fmt.Sprintf(".tmp%d", w))
			for i := 0; !stop.Load(); i++ {
				if err := os.WriteFile(tmp, version(w, i), 0o644); err != nil {
					fail(err)
					return
				}
				if err := os.Rename(tmp, F); err != nil {
					fail(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(F)
				if err != nil {
					if errors.Is(err, syscall.ESTALE) {
						err = fmt.Errorf("ESTALE (a replaced version gone before the open): %w", err)
					}
					fail(err)
					return
				}
				if len(b) == 0 || !bytes.Equal(b, bytes.Repeat(b[:1], len(b))) || len(b) < 100 {
					fail(fmt.Errorf("read %d bytes, not one whole version", len(b)))
					return
				}
				reads.Add(1)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		t.Fatalf("after %d reads and %d replacements: %v", reads.Load(), writes.Load(), err)
	}
	t.Logf("%d reads, %d replacements", reads.Load(), writes.Load())
	if reads.Load() == 0 || writes.Load() == 0 {
		t.Fatal("the test did not run")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := storeStats(t, m)
		if st.Orphans == 0 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(m.store, "kvfs.log"))
			t.Fatalf("%d orphans left 5 s after the last lookup; daemon log:\n%s", st.Orphans, lastLines(log, 20))
		}
	}
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
