package gc_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvfs/kvfs/gc"
	"github.com/kvfs/kvfs/store"
	"github.com/kvfs/kvfs/store/storetest"
)

// Eviction running while files are written, opened and read: a file open
// when eviction comes reads back whole, whatever was evicted around it,
// and the store's invariants hold at the end (storetest's cleanup).
func TestEvictConcurrent(t *testing.T) {
	s := storetest.New(t, storetest.Options{ChunkSize: 4096})
	if _, err := s.SetSettings(map[string]string{"capacity": "256K", "low_water": "50"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/w%d/f%d", w, i)
				data := randBytes(16<<10, uint64(w<<20|i))
				if _, _, err := s.Put(context.Background(), bytes.NewReader(data), int64(len(data)), path, store.PutOptions{}); err != nil {
					errs <- err
					return
				}
				f, err := s.Open(path)
				if err != nil {
					continue // evicted already
				}
				time.Sleep(time.Millisecond)
				got := make([]byte, len(data))
				if n, err := f.ReadAt(got, 0); n != len(data) || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("%s read %d bytes while open: %v", path, n, err)
				}
				f.Close()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := gc.Evict(s); err != nil {
				errs <- err
				return
			}
		}
	}()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := gc.Evict(s); err != nil {
		t.Fatal(err)
	}
	if n := stored(t, s); n > 256<<10 {
		t.Fatalf("stored %d over the capacity after a last eviction", n)
	}
	if c := s.EvictionCounts(); c.Files == 0 {
		t.Fatalf("nothing evicted: %+v", c)
	}
}
