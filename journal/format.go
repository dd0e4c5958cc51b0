package journal

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// On-disk format (little endian). See the package doc for why each field
// is there.
//
// Segment header, segHeaderSize bytes at offset 0:
//
//	0  magic "kvfsjnl\x00"
//	8  version uint32 (1)
//	12 reserved uint32 (0)
//	16 epoch uint64     random, drawn each time the segment is (re)used
//	24 firstSeq uint64  sequence number of the segment's first record
//	32 crc32c uint32 of bytes [0,32)
//	36 zero padding to 64
//
// An all-zero header marks a free segment.
//
// Record, recHeaderSize + len(payload) + 4 bytes, back to back from
// segHeaderSize on:
//
//	0  magic 'K' 'J', version 1, flags 0
//	4  length uint32   payload length
//	8  seq uint64
//	16 synced uint64   every record <= synced was durable when this one was appended
//	24 epoch uint64    the segment's epoch
//	32 payload
//	32+length crc32c uint32 of bytes [0, 32+length)
const (
	segMagic      = "kvfsjnl\x00"
	segVersion    = 1
	segHeaderSize = 64
	segCRCEnd     = 32

	recVersion    = 1
	recHeaderSize = 32
	recCRCSize    = 4
	// recOverhead is the framing around each payload.
	recOverhead = recHeaderSize + recCRCSize
)

// recMagic opens every record: magic, version and flags in one word, so a
// forward search for records looks for these four bytes.
var recMagic = [4]byte{'K', 'J', recVersion, 0}

// castagnoli is the CRC32C table: immutable after init, shared read-only.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type segHeader struct {
	epoch    uint64
	firstSeq uint64
}

func (h segHeader) marshal() []byte {
	b := make([]byte, segHeaderSize)
	copy(b, segMagic)
	binary.LittleEndian.PutUint32(b[8:], segVersion)
	binary.LittleEndian.PutUint64(b[16:], h.epoch)
	binary.LittleEndian.PutUint64(b[24:], h.firstSeq)
	binary.LittleEndian.PutUint32(b[segCRCEnd:], crc32.Checksum(b[:segCRCEnd], castagnoli))
	return b
}

type headerState int

const (
	headerFree headerState = iota // all zeros: a free segment
	headerValid
	headerBad // neither: damaged, or not a segment
)

func parseSegHeader(b []byte) (segHeader, headerState) {
	if len(b) < segHeaderSize {
		if allZero(b) {
			return segHeader{}, headerFree
		}
		return segHeader{}, headerBad
	}
	b = b[:segHeaderSize]
	if allZero(b) {
		return segHeader{}, headerFree
	}
	if string(b[:8]) != segMagic || binary.LittleEndian.Uint32(b[8:]) != segVersion ||
		binary.LittleEndian.Uint32(b[12:]) != 0 ||
		binary.LittleEndian.Uint32(b[segCRCEnd:]) != crc32.Checksum(b[:segCRCEnd], castagnoli) ||
		!allZero(b[segCRCEnd+4:]) {
		return segHeader{}, headerBad
	}
	h := segHeader{epoch: binary.LittleEndian.Uint64(b[16:]), firstSeq: binary.LittleEndian.Uint64(b[24:])}
	if h.firstSeq == 0 {
		return segHeader{}, headerBad
	}
	return h, headerValid
}

// appendRecord appends the framed record to dst.
func appendRecord(dst []byte, seq, synced, epoch uint64, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, recMagic[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint64(dst, synced)
	dst = binary.LittleEndian.AppendUint64(dst, epoch)
	dst = append(dst, payload...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

type recHeader struct {
	length uint32
	seq    uint64
	synced uint64
	epoch  uint64
}

// parseRecHeader decodes a record header; ok is false unless it opens with
// recMagic.
func parseRecHeader(b []byte) (h recHeader, ok bool) {
	if len(b) < recHeaderSize || !bytes.Equal(b[:4], recMagic[:]) {
		return h, false
	}
	return recHeader{
		length: binary.LittleEndian.Uint32(b[4:]),
		seq:    binary.LittleEndian.Uint64(b[8:]),
		synced: binary.LittleEndian.Uint64(b[16:]),
		epoch:  binary.LittleEndian.Uint64(b[24:]),
	}, true
}

// checkRecordCRC reports whether rec (header, payload and CRC) verifies.
func checkRecordCRC(rec []byte) bool {
	n := len(rec) - recCRCSize
	return n >= recHeaderSize && binary.LittleEndian.Uint32(rec[n:]) == crc32.Checksum(rec[:n], castagnoli)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
