package pool

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Cache is a host's local copy of pool chunks: one file per chunk, named
// by its sha256, bounded in bytes (least recently used go first). It
// survives restarts: reads of chunks it holds keep working while S3 is
// unreachable. A chunk file found at open is checked against its name the
// first time it is read (a crash can leave a renamed file whose bytes
// never reached the disk): a damaged one is a miss, and is removed, never
// wrong bytes. Chunks this process added were checked before they were,
// and are not hashed again on each read.
type Cache struct {
	dir   string
	limit int64

	// verifyAlways hashes every read (Config.VerifyCache).
	verifyAlways bool

	mu sync.Mutex
	// later are chunks AddLater took and its writer has not written yet
	// (Get serves them), laterBytes their bytes; wake tells the writer.
	later      map[[32]byte][]byte
	laterBytes int64
	wake       chan struct{}
	writing    sync.WaitGroup
	closed     bool       // Close ran: AddLater adds nothing
	lru        *list.List // of *cacheEntry, most recent first
	byKey      map[[32]byte]*list.Element
	bytes      int64
	st         CacheStats
}

type cacheEntry struct {
	sum      [32]byte
	size     int64
	verified bool // its file's bytes were checked (or written) by this process
}

// CacheStats are the cache's figures.
type CacheStats struct {
	Chunks       int
	Bytes, Limit int64
	Hits, Misses int64
	Evicted      int64
	// Failed counts chunks AddLater could not write (LastError says
	// why: a full or read-only disk): later reads of them miss.
	Failed    int64
	LastError string `json:",omitempty"`
}

// OpenCache opens (creating it) the cache in dir, bounded to limit bytes.
func OpenCache(dir string, limit int64) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("chunk cache %s: %w", dir, err)
	}
	c := &Cache{dir: dir, limit: limit, lru: list.New(), byKey: map[[32]byte]*list.Element{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("chunk cache %s: %w", dir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "known.db") {
			continue // the host's index of manifests (knowledge.go)
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			os.Remove(filepath.Join(dir, e.Name())) // a temporary file of a crash (Add)
			continue
		}
		b, err := hex.DecodeString(e.Name())
		info, ierr := e.Info()
		if err != nil || len(b) != 32 || ierr != nil || !info.Mode().IsRegular() {
			continue // not the cache's: left alone (the directory may be shared)
		}
		var sum [32]byte
		copy(sum[:], b)
		c.byKey[sum] = c.lru.PushBack(&cacheEntry{sum: sum, size: diskSize(info.Size())})
		c.bytes += diskSize(info.Size())
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

// diskSize is what a chunk file of n bytes takes on disk, as the cache
// counts it against its bound: whole blocks of 4 KiB. A file cut where its
// rows end has chunks of a few hundred bytes, each a file of one block:
// counted by their bytes, a cache of them took 8× its bound on disk.
func diskSize(n int64) int64 { return (n + 4095) &^ 4095 }

func (c *Cache) path(sum [32]byte) string { return filepath.Join(c.dir, hex.EncodeToString(sum[:])) }

// Has reports whether the cache holds a chunk named sum, without reading
// it: Get checks its bytes as it reads them (a damaged file is a miss
// then).
func (c *Cache) Has(sum [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byKey[sum]
	if !ok {
		_, ok = c.later[sum]
	}
	return ok
}

// Get returns the chunk named sum, or false.
func (c *Cache) Get(sum [32]byte) ([]byte, bool) {
	c.mu.Lock()
	if b, ok := c.later[sum]; ok {
		c.st.Hits++
		c.mu.Unlock()
		return b, true // checked when it was added
	}
	el, ok := c.byKey[sum]
	verified := false
	if ok {
		c.lru.MoveToFront(el)
		verified = el.Value.(*cacheEntry).verified && !c.verifyAlways
	}
	c.mu.Unlock()
	if !ok {
		c.count(false)
		return nil, false
	}
	b, err := os.ReadFile(c.path(sum))
	if err != nil || (!verified && sha256.Sum256(b) != sum) {
		c.drop(sum)
		c.count(false)
		return nil, false
	}
	if !verified {
		c.mu.Lock()
		if el, ok := c.byKey[sum]; ok {
			el.Value.(*cacheEntry).verified = true
		}
		c.mu.Unlock()
	}
	c.count(true)
	return b, true
}

func (c *Cache) count(hit bool) {
	c.mu.Lock()
	if hit {
		c.st.Hits++
	} else {
		c.st.Misses++
	}
	c.mu.Unlock()
}

// Add stores a chunk whose sha256 the caller has checked.
func (c *Cache) Add(sum [32]byte, b []byte) error {
	if int64(len(b)) > c.limit {
		return nil
	}
	c.mu.Lock()
	_, ok := c.byKey[sum]
	c.mu.Unlock()
	if ok {
		return nil
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("chunk cache %s: %w", c.dir, err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path(sum))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("chunk cache %s: %w", c.dir, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[sum]; !ok {
		c.byKey[sum] = c.lru.PushFront(&cacheEntry{sum: sum, size: diskSize(int64(len(b))), verified: true})
		c.bytes += diskSize(int64(len(b)))
	}
	c.evictLocked()
	return nil
}

// maxLaterBytes bounds the bytes AddLater holds for its writer: past it
// a chunk is not cached (reads faster than the cache's disk skip it).
const maxLaterBytes = 256 << 20

// AddLater is Add off the caller's path: b, checked against sum by the
// caller and not changed by it after, is written by a writer in the
// background, and Get serves it from memory until then. A read of a pool
// file waited for each chunk's file to be created, written and renamed
// (about 0.6 ms for a small chunk on the development machine), which a
// file cut where its rows end pays thousands of times. Past
// maxLaterBytes waiting, a chunk is not cached. Close stops the writer.
func (c *Cache) AddLater(sum [32]byte, b []byte) {
	if int64(len(b)) > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[sum]; ok || c.closed {
		return
	}
	if _, ok := c.later[sum]; ok || c.laterBytes+int64(len(b)) > maxLaterBytes {
		return
	}
	if c.later == nil {
		c.later = map[[32]byte][]byte{}
		c.wake = make(chan struct{}, 1)
		c.writing.Add(1)
		go c.writeLater(c.wake)
	}
	c.later[sum] = b
	c.laterBytes += int64(len(b))
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLater writes AddLater's chunks until Close.
func (c *Cache) writeLater(wake <-chan struct{}) {
	defer c.writing.Done()
	for range wake {
		for {
			c.mu.Lock()
			var sum [32]byte
			var b []byte
			if !c.closed {
				for sum, b = range c.later {
					break
				}
			}
			c.mu.Unlock()
			if b == nil {
				break
			}
			err := c.Add(sum, b) // a chunk not written is a later miss, nothing else
			c.mu.Lock()
			if err != nil {
				c.st.Failed++
				c.st.LastError = err.Error()
			}
			delete(c.later, sum)
			c.laterBytes -= int64(len(b))
			c.mu.Unlock()
		}
	}
}

// Close stops AddLater's writer once the chunk it writes is written; the
// chunks still waiting are not cached. A daemon's exit (which frees its
// spool for the next mount) must not wait for up to maxLaterBytes of
// cache writes: CI mounted again at once after an unmount, and found the
// spool still locked.
func (c *Cache) Close() {
	c.mu.Lock()
	w := c.wake
	c.wake, c.closed = nil, true
	c.mu.Unlock()
	if w != nil {
		close(w)
		c.writing.Wait()
	}
}

func (c *Cache) drop(sum [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[sum]; ok {
		c.removeLocked(el)
	}
}

func (c *Cache) removeLocked(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.byKey, e.sum)
	c.bytes -= e.size
	// A file that cannot be removed now is counted again by the next
	// open's scan, and evicted then.
	os.Remove(c.path(e.sum))
}

func (c *Cache) evictLocked() {
	for c.bytes > c.limit && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back())
		c.st.Evicted++
	}
}

// Stats reports the cache's figures.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.Chunks, st.Bytes, st.Limit = c.lru.Len(), c.bytes, c.limit
	for sum, b := range c.later { // being written
		if _, ok := c.byKey[sum]; !ok {
			st.Chunks++
			st.Bytes += int64(len(b))
		}
	}
	return st
}

// ScanCache counts the chunk files in a cache directory without opening
// the cache (which may be a running daemon's): for kvfs stats.
func ScanCache(dir string) (chunks int, bytes int64, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("chunk cache %s: %w", dir, err)
	}
	for _, e := range ents {
		if b, err := hex.DecodeString(e.Name()); err != nil || len(b) != 32 {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			chunks++
			bytes += diskSize(info.Size())
		}
	}
	return chunks, bytes, nil
}
