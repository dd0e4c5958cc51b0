package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A journal record holds the mutations of one committed transaction:
//
//	record   = version group+
//	group    = nameLen:byte name count:uvarint mutation{count}
//	mutation = keyLen:uvarint key op
//	op       = 0                              delete
//	         | (valueLen+1):uvarint value     put
//
// with version recordV1. Buckets go by name, not by position, so that a
// later version may add buckets without renumbering; groups appear in
// ascending name order, keys in ascending order within a group, each at
// most once; keys are not empty and at most bbolt's MaxKeySize; uvarints
// are minimal. So each set of mutations has exactly one encoding, which
// the decoder checks (FuzzMutations). A decoder refuses a bucket it does
// not know: skipping its mutations would lose them at the next
// checkpoint.
const recordV1 = 1

// bucketsByName lists allBuckets' indexes in name order, the order of a
// record's groups.
var bucketsByName = func() []int {
	idx := make([]int, len(allBuckets))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(allBuckets[a], allBuckets[b]) })
	return idx
}()

// encode returns m's record.
func (m *mutations) encode() []byte {
	size := 1
	for _, es := range m {
		for _, e := range es {
			size += len(e.key) + len(e.val) + 2*binary.MaxVarintLen32
		}
		size += 16
	}
	b := make([]byte, 0, size)
	b = append(b, recordV1)
	for _, i := range bucketsByName {
		es := m[i]
		if len(es) == 0 {
			continue
		}
		b = append(b, byte(len(allBuckets[i])))
		b = append(b, allBuckets[i]...)
		b = binary.AppendUvarint(b, uint64(len(es)))
		for _, e := range es {
			b = binary.AppendUvarint(b, uint64(len(e.key)))
			b = append(b, e.key...)
			if e.del {
				b = append(b, 0)
				continue
			}
			b = binary.AppendUvarint(b, uint64(len(e.val))+1)
			b = append(b, e.val...)
		}
	}
	return b
}

// decodeMutations decodes a record. The entries' keys and values are
// slices of b, which the caller must not change afterwards.
func decodeMutations(b []byte) (*mutations, error) {
	m, err := decodeRecord(b)
	if err != nil {
		return nil, fmt.Errorf("decode journal record: %w", err)
	}
	return m, nil
}

func decodeRecord(b []byte) (*mutations, error) {
	if len(b) == 0 {
		return nil, errors.New("empty record")
	}
	if b[0] != recordV1 {
		return nil, fmt.Errorf("unknown record version %d", b[0])
	}
	b = b[1:]
	if len(b) == 0 {
		return nil, errors.New("record without mutations")
	}
	var m mutations
	var prevName []byte
	for len(b) > 0 {
		n := int(b[0])
		if n > len(b)-1 {
			return nil, fmt.Errorf("bucket name of %d bytes past the end", n)
		}
		name := b[1 : 1+n]
		b = b[1+n:]
		if prevName != nil && bytes.Compare(name, prevName) <= 0 {
			return nil, fmt.Errorf("bucket %q after %q", name, prevName)
		}
		prevName = name
		i := slices.IndexFunc(allBuckets, func(x []byte) bool { return bytes.Equal(x, name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown bucket %q", name)
		}
		count, rest, err := uvarint(b)
		if err != nil {
			return nil, fmt.Errorf("bucket %q: count: %w", name, err)
		}
		// Each mutation takes at least 3 bytes: a count past that is
		// damage, refused before anything is allocated for it.
		if count == 0 || count > uint64(len(rest))/3 {
			return nil, fmt.Errorf("bucket %q: %d mutations in %d bytes", name, count, len(rest))
		}
		b = rest
		es := make([]*entry, 0, count)
		for range count {
			e, rest, err := decodeMutation(b)
			if err != nil {
				return nil, fmt.Errorf("bucket %q, mutation %d: %w", name, len(es), err)
			}
			if len(es) > 0 && bytes.Compare(e.key, es[len(es)-1].key) <= 0 {
				return nil, fmt.Errorf("bucket %q: key %x after %x", name, e.key, es[len(es)-1].key)
			}
			es = append(es, e)
			b = rest
		}
		m[i] = es
	}
	return &m, nil
}

func decodeMutation(b []byte) (*entry, []byte, error) {
	k, b, err := chunk(b, bolt.MaxKeySize)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	if len(k) == 0 {
		return nil, nil, errors.New("empty key")
	}
	op, b, err := uvarint(b)
	if err != nil {
		return nil, nil, fmt.Errorf("key %x: %w", k, err)
	}
	if op == 0 {
		return &entry{key: k, del: true}, b, nil
	}
	n := op - 1
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("key %x: value of %d bytes past the end (%d left)", k, n, len(b))
	}
	if n > bolt.MaxValueSize {
		return nil, nil, fmt.Errorf("key %x: value of %d bytes", k, n)
	}
	v := b[:n:n]
	if v == nil {
		v = []byte{}
	}
	return &entry{key: k, val: v}, b[n:], nil
}
