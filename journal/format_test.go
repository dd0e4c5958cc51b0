package journal

import (
	"bytes"
	"testing"
)

// TestFraming: a record encodes to header, payload and CRC32C; every
// field decodes back; any flipped bit fails the CRC.
func TestFraming(t *testing.T) {
	p := []byte("hello, journal")
	b := appendRecord([]byte("prefix"), 42, 41, 0xdeadbeef, p)[len("prefix"):]
	if len(b) != recOverhead+len(p) {
		t.Fatalf("record is %d bytes, want %d", len(b), recOverhead+len(p))
	}
	h, ok := parseRecHeader(b)
	if !ok || h.seq != 42 || h.synced != 41 || h.epoch != 0xdeadbeef || int(h.length) != len(p) {
		t.Fatalf("header decodes to %+v, ok %v", h, ok)
	}
	if !checkRecordCRC(b) || !bytes.Equal(b[recHeaderSize:recHeaderSize+len(p)], p) {
		t.Fatal("record does not verify")
	}
	for i := range b {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if checkRecordCRC(c) {
				t.Fatalf("flip of bit %d of byte %d passes the CRC", bit, i)
			}
		}
	}

	sh := segHeader{epoch: 7, firstSeq: 1000}
	hb := sh.marshal()
	if got, st := parseSegHeader(hb); st != headerValid || got != sh {
		t.Fatalf("segment header decodes to %+v (%v)", got, st)
	}
	if _, st := parseSegHeader(make([]byte, segHeaderSize)); st != headerFree {
		t.Fatal("zero header is not free")
	}
	for i := range hb {
		c := bytes.Clone(hb)
		c[i] ^= 0x10
		if _, st := parseSegHeader(c); st != headerBad {
			t.Fatalf("segment header with byte %d flipped is %v", i, st)
		}
	}
}

func TestSegName(t *testing.T) {
	for name, want := range map[string]int{"000001.seg": 1, "123456.seg": 123456, "1234567.seg": 1234567} {
		if n, ok := parseSegName(name); !ok || n != want {
			t.Errorf("%s: %d %v", name, n, ok)
		}
	}
	for _, name := range []string{"1.seg", "000000.seg", "00001.seg", "000001.seg.tmp", "abcdef.seg", "0000001.seg"} {
		if _, ok := parseSegName(name); ok {
			t.Errorf("%s parses", name)
		}
	}
}
