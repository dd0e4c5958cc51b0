package snapgen

import (
	"bytes"
	"testing"
)

// TestSnapshotPrefixRows: a snapshot is the same each time it is made
// (its tensors are filled on several goroutines), and two snapshots whose
// tokens share a prefix hold the same bytes in those tokens' rows of every
// head, and other bytes after.
func TestSnapshotPrefixRows(t *testing.T) {
	m := Tiny
	base := Tokens(100, 1)
	long := Extend(base, 30, 2)
	_, a := m.Snapshot(base)
	_, again := m.Snapshot(base)
	_, b := m.Snapshot(long)
	row := int64(m.HeadDim * m.DType.Size())
	for i := range a {
		if !bytes.Equal(a[i].Data, again[i].Data) {
			t.Fatalf("tensor %d differs between two snapshots of the same tokens", i)
		}
		for hd := int64(0); hd < int64(m.KVHeads); hd++ {
			pa := a[i].Data[hd*100*row : (hd*100+100)*row]
			pb := b[i].Data[hd*130*row : (hd*130+100)*row]
			if !bytes.Equal(pa, pb) {
				t.Fatalf("tensor %d head %d: the shared prefix's rows differ", i, hd)
			}
			if bytes.Equal(b[i].Data[(hd*130+100)*row:(hd*130+101)*row], b[i].Data[(hd*130+99)*row:(hd*130+100)*row]) {
				t.Fatalf("tensor %d head %d: a new token's row repeats the last one's", i, hd)
			}
		}
	}
}
