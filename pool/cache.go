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

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[[32]byte]*list.Element
	bytes int64
	st    CacheStats
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
		c.byKey[sum] = c.lru.PushBack(&cacheEntry{sum: sum, size: info.Size()})
		c.bytes += info.Size()
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

func (c *Cache) path(sum [32]byte) string { return filepath.Join(c.dir, hex.EncodeToString(sum[:])) }

// Has reports whether the cache holds a chunk named sum, without reading
// it: Get checks its bytes as it reads them (a damaged file is a miss
// then).
func (c *Cache) Has(sum [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byKey[sum]
	return ok
}

// Get returns the chunk named sum, or false.
func (c *Cache) Get(sum [32]byte) ([]byte, bool) {
	c.mu.Lock()
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
		c.byKey[sum] = c.lru.PushFront(&cacheEntry{sum: sum, size: int64(len(b)), verified: true})
		c.bytes += int64(len(b))
	}
	c.evictLocked()
	return nil
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
			bytes += info.Size()
		}
	}
	return chunks, bytes, nil
}
