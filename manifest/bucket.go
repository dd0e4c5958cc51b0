package manifest

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// bucket is what the rest of the package sees of a top-level bucket: the
// subset of bbolt's Bucket it uses (Get, Put, Delete, Cursor, ForEach).
// In plain mode it is the bbolt bucket of the transaction. In journal mode
// (see journal.go) it reads through three layers, newest first: the
// transaction's own writes, the overlay version the transaction started
// on, and a bbolt read transaction; and it writes only into the first.
type bucket struct {
	bb *bolt.Bucket
	j  *jtx // nil in plain mode
	i  int  // index in allBuckets, in journal mode

	name []byte   // the bucket's name, for ch
	ch   *Changes // the change feed's record (changes.go); nil if none
}

// b returns the top-level bucket name, which must be one of allBuckets.
func (t *Tx) b(name []byte) bucket {
	i := bucketIndex(name)
	bb := t.bbs[i]
	if bb == nil {
		bb = t.tx.Bucket(name)
		t.bbs[i] = bb
	}
	if t.j == nil {
		return bucket{bb: bb, name: name, ch: t.ch}
	}
	return bucket{bb: bb, j: t.j, i: i, name: name, ch: t.ch}
}

// jtx is the journal-mode state of a transaction.
type jtx struct {
	v *version // the overlay version it reads, never changed
	w *writes  // its own mutations; nil in a View
}

// writes are a write transaction's mutations, ordered per bucket, so that
// its cursors can merge them and its reads see them.
type writes struct {
	trees [numBuckets]*tree
	n     int // entries in trees
}

func (w *writes) set(i int, e *entry) {
	if w.trees[i] == nil {
		w.trees[i] = newTree()
	}
	if _, replaced := w.trees[i].ReplaceOrInsert(item{e.key, e}); !replaced {
		w.n++
	}
}

func (w *writes) unset(i int, k []byte) {
	if w.trees[i] != nil {
		if _, ok := w.trees[i].Delete(item{key: k}); ok {
			w.n--
		}
	}
}

// lookup finds k in the transaction's writes, then in its overlay version.
func (j *jtx) lookup(i int, k []byte) (*entry, bool) {
	if j.w != nil && j.w.trees[i] != nil {
		if it, ok := j.w.trees[i].Get(item{key: k}); ok {
			return it.e, true
		}
	}
	if t := j.v.trees[i]; t != nil {
		it, ok := t.Get(item{key: k})
		return it.e, ok
	}
	return nil, false
}

// Get returns the value of k, or nil. A key stored with an empty value
// gives an empty, non-nil slice, as bbolt does. The value must not be
// changed, and is valid only during the transaction.
func (b bucket) Get(k []byte) []byte {
	if b.j == nil {
		return b.bb.Get(k)
	}
	if e, ok := b.j.lookup(b.i, k); ok {
		return e.value()
	}
	return b.bb.Get(k)
}

// Put sets k to v, with bbolt's checks, so that whatever a journal-mode
// transaction records can be applied to bbolt at checkpoint.
func (b bucket) Put(k, v []byte) error {
	if b.ch != nil {
		b.ch.note(b, k, v, false)
	}
	if b.j == nil {
		return b.bb.Put(k, v)
	}
	switch {
	case b.j.w == nil:
		return berrors.ErrTxNotWritable
	case len(k) == 0:
		return berrors.ErrKeyRequired
	case len(k) > bolt.MaxKeySize:
		return berrors.ErrKeyTooLarge
	case int64(len(v)) > bolt.MaxValueSize:
		return berrors.ErrValueTooLarge
	}
	b.j.w.set(b.i, &entry{key: clip(k), val: clip(v)})
	return nil
}

// clip copies b into a slice of its own with no room past its end, so
// that a caller's append to what Get or a cursor returns copies rather
// than writing into memory that other transactions share.
func clip(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

// Delete removes k; a missing key is no error. In journal mode it records
// a tombstone only when a lower layer holds the key: deleting what is not
// there costs the journal nothing.
func (b bucket) Delete(k []byte) error {
	if b.ch != nil {
		b.ch.note(b, k, nil, true)
	}
	if b.j == nil {
		return b.bb.Delete(k)
	}
	if b.j.w == nil {
		return berrors.ErrTxNotWritable
	}
	below := b.bb.Get(k) != nil
	if t := b.j.v.trees[b.i]; t != nil {
		if it, ok := t.Get(item{key: k}); ok {
			below = !it.e.del
		}
	}
	if below {
		b.j.w.set(b.i, &entry{key: clip(k), del: true})
	} else {
		b.j.w.unset(b.i, k)
	}
	return nil
}

// ForEach calls fn for every key in order, until fn returns an error.
func (b bucket) ForEach(fn func(k, v []byte) error) error {
	if b.j == nil {
		return b.bb.ForEach(fn)
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Cursor returns a cursor over the bucket's keys in order.
func (b bucket) Cursor() *cursor {
	return &cursor{bc: b.bb.Cursor(), j: b.j, i: b.i}
}

// cursor walks a bucket in key order. In journal mode it merges the
// transaction's writes, its overlay version and bbolt: at each step the
// smallest key of the three wins, taken from the newest layer that holds
// it, and a tombstone there hides the key (the cursor moves past it). The
// two in-memory layers are searched again at each step (O(log n)), so a
// write during the walk is seen as bbolt's cursor would see it.
type cursor struct {
	bc *bolt.Cursor
	j  *jtx
	i  int

	bk, bv []byte // bbolt cursor's position (bk nil: past the end)
	key    []byte // merged position (nil: past the end)
}

// First moves to the first key.
func (c *cursor) First() ([]byte, []byte) {
	if c.j == nil {
		return c.bc.First()
	}
	c.bk, c.bv = c.bc.First()
	return c.settle(nil, true)
}

// Seek moves to the first key at or after seek.
func (c *cursor) Seek(seek []byte) ([]byte, []byte) {
	if c.j == nil {
		return c.bc.Seek(seek)
	}
	c.bk, c.bv = c.bc.Seek(seek)
	return c.settle(seek, true)
}

// Next moves to the next key.
func (c *cursor) Next() ([]byte, []byte) {
	if c.j == nil {
		return c.bc.Next()
	}
	if c.key == nil {
		return nil, nil
	}
	return c.settle(c.key, false)
}

// Delete removes the key at the cursor's position.
func (c *cursor) Delete() error {
	if c.j == nil {
		return c.bc.Delete()
	}
	if c.key == nil {
		return nil
	}
	return bucket{bb: c.bc.Bucket(), j: c.j, i: c.i}.Delete(c.key)
}

// settle moves to the first visible key at or after from (after it, if
// not incl), given that bbolt's cursor is at or before that place.
func (c *cursor) settle(from []byte, incl bool) ([]byte, []byte) {
	for {
		for c.bk != nil && !after(c.bk, from, incl) {
			c.bk, c.bv = c.bc.Next()
		}
		var we, oe *entry
		if c.j.w != nil {
			we = ceil(c.j.w.trees[c.i], from, incl)
		}
		oe = ceil(c.j.v.trees[c.i], from, incl)
		k := c.bk
		for _, e := range []*entry{oe, we} {
			if e != nil && (k == nil || bytes.Compare(e.key, k) < 0) {
				k = e.key
			}
		}
		if k == nil {
			c.key = nil
			return nil, nil
		}
		var e *entry
		switch {
		case we != nil && bytes.Equal(we.key, k):
			e = we
		case oe != nil && bytes.Equal(oe.key, k):
			e = oe
		}
		if e == nil {
			c.key = k
			return k, c.bv
		}
		if !e.del {
			c.key = k
			return k, e.value()
		}
		from, incl = k, false
	}
}

// after reports whether k lies in the range that starts at from
// (inclusive or not).
func after(k, from []byte, incl bool) bool {
	d := bytes.Compare(k, from)
	return d > 0 || (incl && d == 0)
}

// ceil returns the first entry of t at or after from (after it, if not
// incl), or nil.
func ceil(t *tree, from []byte, incl bool) *entry {
	if t == nil {
		return nil
	}
	var out *entry
	t.AscendGreaterOrEqual(item{key: from}, func(it item) bool {
		if !incl && bytes.Equal(it.key, from) {
			return true
		}
		out = it.e
		return false
	})
	return out
}
