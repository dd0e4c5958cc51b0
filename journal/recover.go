package journal

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
)

// recover rebuilds the writer state from the segments on disk. Called by
// Open before the journal is shared.
func (j *Journal) recover(segs []*segment) error {
	var live, headless []*segment
	bad := 0
	hdr := make([]byte, segHeaderSize)
	for _, s := range segs {
		j.nextNum = max(j.nextNum, s.num+1)
		n, err := s.f.ReadAt(hdr, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("journal: read segment header %s: %w", s.path, err)
		}
		h, st := parseSegHeader(hdr[:n])
		switch st {
		case headerValid:
			s.epoch, s.firstSeq = h.epoch, h.firstSeq
			live = append(live, s)
		case headerFree:
			j.free = append(j.free, s)
			headless = append(headless, s)
		default:
			// Either a header whose write was torn (its records were
			// never synced: the header is synced with them) or damage.
			// A damaged header of a live segment leaves a gap in the
			// chain, reported below, unless it was the last segment.
			bad++
			j.log.Warn("journal: segment header is not valid; reusing the segment", "path", s.path)
			j.free = append(j.free, s)
			headless = append(headless, s)
		}
	}
	r := &segReader{}
	if len(live) == 0 {
		if err := j.checkHeadless(headless, 0); err != nil {
			return err
		}
		if bad > 0 {
			return fmt.Errorf("journal: open %s: no segment has a valid header, but %d are damaged: %w", j.dir, bad, ErrCorrupt)
		}
		return j.start()
	}
	slices.SortFunc(live, func(a, b *segment) int { return cmp.Compare(a.firstSeq, b.firstSeq) })
	for i := 1; i < len(live); i++ {
		if live[i].firstSeq == live[i-1].firstSeq {
			return &CorruptError{Path: live[i].path, Offset: 0, Seq: live[i].firstSeq, Reason: fmt.Sprintf(
				"%s begins at the same seq", filepath.Base(live[i-1].path))}
		}
	}
	for i, s := range live[:len(live)-1] {
		end, next, err := j.scan(r, s)
		if err != nil {
			return err
		}
		s.end = end
		if nx := live[i+1]; next != nx.firstSeq {
			return &CorruptError{Path: s.path, Offset: end, Seq: next, Reason: fmt.Sprintf(
				"the record here is missing or damaged, but %s begins at seq %d", filepath.Base(nx.path), nx.firstSeq)}
		}
	}
	head := live[len(live)-1]
	end, next, err := j.scan(r, head)
	if err != nil {
		return err
	}
	head.end = end
	if err := j.checkHeadless(headless, next); err != nil {
		return err
	}
	seal, err := j.classifyTail(r, head, end, next)
	if err != nil {
		return err
	}
	j.chain = live
	if seal && end == segHeaderSize {
		// Not one valid record: rather than a new segment beginning at
		// the same seq, a new life of this one (the leftovers carry the
		// old epoch).
		if err := head.writeHeader(segHeader{epoch: newEpoch(), firstSeq: head.firstSeq}); err != nil {
			return err
		}
		seal = false
	}
	if !seal && head.size < j.opts.SegmentSize {
		if err := head.ensureSize(j.opts.SegmentSize, j.opts.SyncFile); err != nil {
			return err
		}
	}
	// What was read may sit in the page cache only (a killed process's
	// unsynced writes): make it durable before calling it so.
	if err := j.syncSeg(head); err != nil {
		return err
	}
	j.next = next
	j.durable.Store(next - 1)
	j.lepoch, j.lpos, j.lcap = head.epoch, end, head.size
	if seal {
		j.lpos = j.lcap // the first Append switches to a new segment
	}
	j.prepareSpare()
	return nil
}

// start begins an empty journal: a first segment whose first record is
// sequence number 1, its header durable before Open returns.
func (j *Journal) start() error {
	s, err := j.takeSegment()
	if err != nil {
		return err
	}
	j.chain = []*segment{s}
	if err := s.writeHeader(segHeader{epoch: newEpoch(), firstSeq: 1}); err != nil {
		return err
	}
	if err := j.syncSeg(s); err != nil {
		return err
	}
	j.next = 1
	j.lepoch, j.lpos, j.lcap = s.epoch, s.end, s.size
	return nil
}

// scan walks a segment's valid records from its start: each must belong to
// the segment's life, carry the next sequence number and verify. It
// returns where the run ends and the sequence number expected there.
func (j *Journal) scan(r *segReader, s *segment) (end int64, next uint64, err error) {
	r.s, r.buf = s, r.buf[:0]
	off, seq := int64(segHeaderSize), s.firstSeq
	for {
		h, _, ok, err := r.record(off, s.epoch, j.opts.MaxPayload)
		if err != nil {
			return 0, 0, err
		}
		if !ok || h.seq != seq {
			return off, seq, nil
		}
		off += recOverhead + int64(h.length)
		seq++
	}
}

// classifyTail decides what the end of the last segment's valid records
// at off is. Nothing valid of this segment's life after it: the end of the
// log, logged as a dropped torn tail unless the bytes there are zeros or a
// record of an earlier life. Valid records after it: if one of them was
// appended after seq was already durable (its synced field says so), the
// damaged record was committed and recovery must stop (CorruptError);
// otherwise the damage and everything after it belong to writes no Sync
// covered (a crash left some of their pages on disk and not others), and
// they are dropped. Their valid records stay in the segment, so it is
// sealed (seal): new records go to a new segment with a new epoch, and a
// later recovery cannot take the leftovers for records written since.
// (A segment without one valid record gets a new epoch instead, so that
// no two segments begin at the same seq.)
func (j *Journal) classifyTail(r *segReader, s *segment, off int64, seq uint64) (seal bool, err error) {
	n, maxSynced, first, err := r.later(off, s.epoch, seq, j.opts.MaxPayload)
	if err != nil {
		return false, err
	}
	if n > 0 {
		if first >= 0 {
			return false, &CorruptError{Path: s.path, Offset: off, Seq: seq, Reason: fmt.Sprintf(
				"the record here is damaged, but the record at offset %d was appended after seq %d was durable", first, maxSynced)}
		}
		// A sync may have covered them all the same (no later record
		// says so): the damage cannot be told from a torn write.
		j.log.Warn("journal: dropped a torn tail: a damaged record followed by records that no later record shows synced",
			"path", s.path, "offset", off, "seq", seq, "later_records", n)
		return true, nil
	}
	b, ok, err := r.at(off, int(min(recHeaderSize, s.size-off)))
	if err != nil || !ok {
		return false, err
	}
	if allZero(b) {
		return false, nil
	}
	if h, ok := parseRecHeader(b); ok && h.epoch != 0 && h.epoch != s.epoch && h.seq < s.firstSeq {
		return false, nil // a record of the segment's earlier life
	}
	if j.opts.ClosedClean {
		j.log.Debug("journal: the log ends here; the bytes after it are a recycled segment's (closed clean)", "path", s.path, "offset", off, "seq", seq)
		return false, nil
	}
	j.log.Warn("journal: dropped a torn tail", "path", s.path, "offset", off, "seq", seq)
	return false, nil
}

// checkHeadless looks into the segments without a valid header (free ones,
// whose header is zeros, and damaged ones) for the journal's continuation:
// records from the header's place on that carry sequence numbers from
// next on (any, if no segment is live), one of which was appended after
// the first of them was durable. A segment's header is synced with its
// first records, so such a segment had a header, and has lost it: its
// records were synced, and dropping them would lose committed changes
// without a word. A torn header (a crash before the segment's first sync)
// leaves no such proof, nor does a recycled segment, whose records come
// before every live one.
func (j *Journal) checkHeadless(segs []*segment, next uint64) error {
	r := &segReader{}
	for _, s := range segs {
		r.s, r.buf, r.off = s, r.buf[:0], 0
		off := int64(segHeaderSize)
		b, ok, err := r.at(off, recHeaderSize)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		first, ok := parseRecHeader(b)
		if !ok || (next > 0 && first.seq != next) {
			continue
		}
		for seq := first.seq; ; seq++ {
			h, _, ok, err := r.record(off, first.epoch, j.opts.MaxPayload)
			if err != nil {
				return err
			}
			if !ok || h.seq != seq {
				break
			}
			if h.synced >= first.seq {
				return &CorruptError{Path: s.path, Offset: 0, Seq: first.seq, Reason: fmt.Sprintf(
					"the segment's header is missing or damaged, but its records continue the journal from seq %d, and the record at offset %d was appended after seq %d was durable",
					first.seq, off, h.synced)}
			}
			off += recOverhead + int64(h.length)
		}
	}
	return nil
}
