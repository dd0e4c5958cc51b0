package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// readWindow is the least a segReader reads at once.
const readWindow = 1 << 20

// segReader reads a segment through a window, so that a sequential scan
// of small records costs one read per window, not two per record.
type segReader struct {
	s   *segment
	buf []byte
	off int64 // file offset of buf[0]
}

// at returns n bytes at off, valid until the next call; ok is false when
// they lie beyond the end of the file.
func (r *segReader) at(off int64, n int) (b []byte, ok bool, err error) {
	if off < 0 || off+int64(n) > r.s.size {
		return nil, false, nil
	}
	if off >= r.off && off+int64(n) <= r.off+int64(len(r.buf)) {
		return r.buf[off-r.off : off-r.off+int64(n)], true, nil
	}
	want := int(min(max(int64(n), readWindow), r.s.size-off))
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	m, err := r.s.f.ReadAt(r.buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		r.buf = r.buf[:0]
		return nil, false, fmt.Errorf("journal: read segment %s: %w", r.s.path, err)
	}
	r.buf, r.off = r.buf[:m], off
	if m < n {
		return nil, false, nil // the file shrank under us
	}
	return r.buf[:n], true, nil
}

// record returns the record at off if it is whole and belongs to the
// segment's current life: magic, a length that fits maxPayload and the
// file, the epoch and the CRC all check. The sequence number is the
// caller's to check. payload is valid until the next call.
func (r *segReader) record(off int64, epoch uint64, maxPayload int) (h recHeader, payload []byte, ok bool, err error) {
	b, ok, err := r.at(off, recHeaderSize)
	if !ok || err != nil {
		return h, nil, false, err
	}
	h, ok = parseRecHeader(b)
	if !ok || h.epoch != epoch || int64(h.length) > int64(maxPayload) ||
		off+recOverhead+int64(h.length) > r.s.size {
		return h, nil, false, nil
	}
	b, ok, err = r.at(off, recOverhead+int(h.length))
	if !ok || err != nil || !checkRecordCRC(b) {
		return h, nil, false, err
	}
	return h, b[recHeaderSize : recHeaderSize+int(h.length)], true, nil
}

// later looks past a damaged record at off for whole records of the
// segment's life with a sequence number >= seq: the proof that the damage
// is not at the end of what was written. It returns how many there are and
// the largest synced watermark among them.
func (r *segReader) later(off int64, epoch, seq uint64, maxPayload int) (n int, maxSynced uint64, first int64, err error) {
	first = -1
	for p := off + 1; p+recOverhead <= r.s.size; {
		w := int(min(readWindow, r.s.size-p))
		b, ok, err := r.at(p, w)
		if err != nil || !ok {
			return n, maxSynced, first, err
		}
		i := bytes.Index(b, recMagic[:])
		if i < 0 {
			if p+int64(w) >= r.s.size {
				break
			}
			p += int64(w - len(recMagic) + 1)
			continue
		}
		q := p + int64(i)
		h, _, ok, err := r.record(q, epoch, maxPayload)
		if err != nil {
			return n, maxSynced, first, err
		}
		if ok && h.seq >= seq {
			n++
			if first < 0 && h.synced >= seq {
				// The first record that proves seq was durable.
				first, maxSynced = q, h.synced
			}
			if first < 0 {
				maxSynced = max(maxSynced, h.synced)
			}
		}
		p = q + 1
	}
	return n, maxSynced, first, nil
}
