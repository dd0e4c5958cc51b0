package manifest

import (
	"bytes"

	"github.com/google/btree"
)

// The overlay is the part of the index that the journal holds and bbolt
// does not yet: the mutations of the records committed since the last
// checkpoint, per bucket, newest value per key. Each commit publishes a
// new version; a version is never changed once published, so a reader
// holds one without a lock. Versions share their unchanged parts: the
// per-bucket trees are github.com/google/btree B-trees, whose Clone is
// O(1) and copy-on-write (a mutation of the clone copies the nodes on its
// path, and the original keeps its own). That library is well kept and
// tested; a hand-written persistent tree would be more code to get right.

// numBuckets is the number of top-level buckets, len(allBuckets).
const numBuckets = 15

// treeDegree is the overlay trees' B-tree degree: nodes of up to 63 keys,
// about a cache line of pointers per level.
const treeDegree = 32

// entryOverhead approximates what an overlay entry costs besides its key
// and value (the entry, its slice headers, its share of tree nodes), for
// the overlay's memory bound.
const entryOverhead = 96

// entry is one key's state in a layer: a value, or a tombstone (del) that
// hides the key in the layers below. Entries are immutable once in a
// published version; their identity (the pointer) tells a checkpoint
// whether a key changed since the version it applied.
type entry struct {
	key []byte
	val []byte // never nil when !del
	del bool
}

// value is the entry's value as Get returns it: nil for a tombstone.
func (e *entry) value() []byte {
	if e.del {
		return nil
	}
	return e.val
}

func (e *entry) size() int64 { return int64(len(e.key)+len(e.val)) + entryOverhead }

// item is an entry in an overlay tree. It holds the key itself, not only
// through the entry, so that a search reads the keys from the tree's
// nodes and not from every entry it passes (a lookup in a large overlay
// costs half the cache misses).
type item struct {
	key []byte
	e   *entry
}

// tree is a layer of one bucket: items in key order.
type tree = btree.BTreeG[item]

func itemLess(a, b item) bool { return bytes.Compare(a.key, b.key) < 0 }

func newTree() *tree { return btree.NewG(treeDegree, itemLess) }

// version is one published state of the overlay.
type version struct {
	// seq is the sequence number of the last journal record whose
	// mutations the version holds (or that a checkpoint applied).
	seq uint64
	// dropped is the highest checkpoint sequence number whose entries
	// were dropped from this version (or an earlier one it derives
	// from): a reader may pair the version only with a bbolt state that
	// includes that checkpoint (see DB.snapshot).
	dropped uint64
	trees   [numBuckets]*tree
	entries int   // entries in trees, tombstones included
	bytes   int64 // their approximate memory
}

// mutations are the changes of one journal record: per bucket (index in
// allBuckets), entries in ascending key order.
type mutations [numBuckets][]*entry

// count returns the number of mutations.
func (m *mutations) count() int {
	n := 0
	for _, es := range m {
		n += len(es)
	}
	return n
}

// mutations lists a transaction's writes.
func (w *writes) mutations() *mutations {
	var m mutations
	for i, t := range w.trees {
		if t == nil || t.Len() == 0 {
			continue
		}
		es := make([]*entry, 0, t.Len())
		t.Ascend(func(it item) bool { es = append(es, it.e); return true })
		m[i] = es
	}
	return &m
}

// with returns a new version: v plus the mutations of record seq. v is
// not changed (its trees are cloned before the first change). The
// entries become the new version's; the caller must not change them.
func (v *version) with(m *mutations, seq uint64) *version {
	nv := *v
	nv.seq = seq
	for i, es := range m {
		if len(es) == 0 {
			continue
		}
		if nv.trees[i] == nil {
			nv.trees[i] = newTree()
		} else {
			nv.trees[i] = nv.trees[i].Clone()
		}
		for _, e := range es {
			nv.bytes += e.size()
			if old, ok := nv.trees[i].ReplaceOrInsert(item{e.key, e}); ok {
				nv.bytes -= old.e.size()
			} else {
				nv.entries++
			}
		}
	}
	return &nv
}

// placed is an entry of a version with its bucket.
type placed struct {
	i int
	e *entry
}

// without returns a new version: v less those of the given entries that
// it still holds (the same entry, not a newer one for the same key),
// marked as depending on checkpoint seq.
func (v *version) without(es []placed, seq uint64) *version {
	nv := *v
	nv.dropped = max(nv.dropped, seq)
	var cloned [numBuckets]bool
	for _, p := range es {
		t := nv.trees[p.i]
		if t == nil {
			continue
		}
		if cur, ok := t.Get(item{key: p.e.key}); !ok || cur.e != p.e {
			continue
		}
		if !cloned[p.i] {
			t = t.Clone()
			nv.trees[p.i], cloned[p.i] = t, true
		}
		t.Delete(item{key: p.e.key})
		nv.entries--
		nv.bytes -= p.e.size()
	}
	return &nv
}

// bucketIndex returns the index of a top-level bucket in allBuckets.
func bucketIndex(name []byte) int {
	for i, b := range allBuckets {
		if bytes.Equal(b, name) {
			return i
		}
	}
	panic("manifest: unknown bucket " + string(name))
}
