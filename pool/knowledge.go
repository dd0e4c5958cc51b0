package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bounds on what a host keeps of the pool in memory. Knowledge is only a
// hint (doc.go, "Dedup across hosts"): past a bound it starts over, which
// costs re-reading manifests and perhaps a duplicate upload, never a wrong
// byte.
const (
	maxCachedManifests = 1 << 10 // parsed manifests kept for reads
	// and their memory (Manifest.memBytes): a manifest may hold 64 MiB of
	// JSON, and anyone who can write to the bucket and etcd can make
	// names of such (red team: 16 MiB of heap each).
	maxCachedManifestBytes = 256 << 20
	maxSeen                = 1 << 20   // names of the manifests learned
	maxLineageKeys         = 1 << 22   // chain keys of the lineages learned: 128 MiB
	maxKnown               = 1 << 21   // chunk locations (2 TiB of 1 MiB chunks)
	maxManifests           = 1 << 14   // manifests kept on disk
	maxKnownBytes          = 256 << 20 // and their bytes (a long conversation's manifests made 530 MB)
)

// knowledge is a host's local bbolt index of the manifests it has read or
// published (KNOWN under the cache directory), so that after a restart it
// still knows which chunks the pool holds without reading every manifest
// again. Manifests are immutable and named by their hash: each is checked
// against its name and parsed again when loaded, so a damaged index only
// loses what it held.
type knowledge struct {
	db    *bolt.DB
	n     int   // manifests held
	bytes int64 // and their bytes
}

var bucketManifests = []byte("manifests")

// openKnowledge opens (creating it) the index in dir. An index that does
// not open for any reason but another process holding it is set aside
// (known.db.bad) and started over: it only held hints.
func openKnowledge(dir string) (*knowledge, error) {
	path := filepath.Join(dir, "known.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("pool index %s: in use (is another kvfs using this cache directory?)", path)
	}
	if err != nil {
		if rerr := os.Rename(path, path+".bad"); rerr != nil {
			return nil, fmt.Errorf("pool index %s: %w", path, err)
		}
		if db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second}); err != nil {
			return nil, fmt.Errorf("pool index %s: %w", path, err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketManifests)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("pool index %s: %w", path, err)
	}
	return &knowledge{db: db}, nil
}

// load calls fn for each manifest the index holds that checks out.
func (k *knowledge) load(fn func(name string, m *Manifest)) error {
	return k.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketManifests).ForEach(func(key, b []byte) error {
			k.n++
			k.bytes += int64(len(b))
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != string(key) {
				return nil
			}
			if m, err := DecodeManifest(b); err == nil {
				fn(string(key), m)
			}
			return nil
		})
	})
}

// add records manifest name; past maxManifests the index starts over.
// Concurrent adds share a commit (bolt's Batch, which runs the function
// under its own lock, so k.n needs none).
func (k *knowledge) add(name string, m *Manifest) error {
	enc, b, err := m.Encode()
	if err != nil || enc != name {
		return err // a manifest made here encodes to its name; others are not kept
	}
	return k.db.Batch(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketManifests)
		if k.n >= maxManifests || k.bytes+int64(len(b)) > maxKnownBytes {
			if err := tx.DeleteBucket(bucketManifests); err != nil {
				return err
			}
			if bk, err = tx.CreateBucket(bucketManifests); err != nil {
				return err
			}
			k.n, k.bytes = 0, 0
		}
		k.n++
		k.bytes += int64(len(b))
		return bk.Put([]byte(name), b)
	})
}

func (k *knowledge) close() error { return k.db.Close() }
