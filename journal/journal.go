package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configure a Journal. The zero value gives the defaults.
type Options struct {
	// SegmentSize is the size of each segment file (default 64 MiB).
	// Existing segments keep their size.
	SegmentSize int64
	// MaxPayload bounds one record's payload (default 16 MiB). Recovery
	// rejects longer lengths, so a damaged length field cannot make it
	// allocate more. It must fit a segment with its framing.
	MaxPayload int
	// BufferSize bounds the bytes appended but not yet written to a
	// segment (default 4 MiB): an Append that passes it writes them out,
	// without a sync.
	BufferSize int
	// MaxFree is how many free segments Truncate keeps for reuse
	// (default 2); it deletes the others.
	MaxFree int
	// Logger receives recovery's reports (dropped tails) and failures.
	// Default: discard.
	Logger *slog.Logger
	// WriteThrough makes Append write its record to its segment (without
	// a sync) before it returns, or, while another caller is writing or
	// syncing, leaves it to that caller, who writes it before giving up
	// the writer role. A crash of the process then loses no appended
	// record (the page cache holds them); a crash of the machine loses
	// those not synced, as without it. kvfs's store uses it so that a
	// killed daemon loses no change that returned, synced or not.
	WriteThrough bool
	// SyncFile makes a segment's written data durable (the directory is
	// always fsynced). Default:
	// fdatasync(2). Tests inject failures and delays through it.
	SyncFile func(*os.File) error
	// NoSpace, if set, is called when a new segment cannot be made for
	// lack of space (ENOSPC), before the journal gives up: it may free
	// space (kvfs's store gives up its disk space reserve) and report
	// whether it did, and the segment is tried once more. The journal
	// needs a segment to record the removals that would make room: a
	// full disk must not leave it unable to take them.
	NoSpace func(err error) bool
	// ClosedClean says that the journal's last user closed it without an
	// error (every record flushed and synced; the store keeps a marker):
	// then no write of it was torn, and unreadable bytes after its last
	// record are leftovers of a recycled segment's earlier life, which
	// recovery logs at debug level instead of warning of a torn tail (a
	// warning after every clean restart teaches operators to ignore the
	// one that matters).
	ClosedClean bool
	// OnSync, if set, is told how long each group commit took to make
	// its batch durable: the write of the records it took and the
	// fdatasync (kvfs exports it as a latency histogram). It is called
	// by the syncing caller, without the journal's lock, and must not
	// call the journal.
	OnSync func(time.Duration)
}

const (
	defaultSegmentSize = 64 << 20
	defaultMaxPayload  = 16 << 20
	defaultBufferSize  = 4 << 20
	defaultMaxFree     = 2
)

func (o Options) withDefaults() (Options, error) {
	if o.SegmentSize == 0 {
		o.SegmentSize = defaultSegmentSize
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = int(min(defaultMaxPayload, o.SegmentSize-segHeaderSize-recOverhead))
	}
	if o.BufferSize == 0 {
		o.BufferSize = defaultBufferSize
	}
	if o.MaxFree == 0 {
		o.MaxFree = defaultMaxFree
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SyncFile == nil {
		o.SyncFile = fdatasync
	}
	if o.MaxPayload <= 0 || int64(o.MaxPayload) > o.SegmentSize-segHeaderSize-recOverhead {
		return o, fmt.Errorf("journal: MaxPayload %d does not fit a segment of %d bytes", o.MaxPayload, o.SegmentSize)
	}
	if o.BufferSize < 0 || o.MaxFree < 0 {
		return o, errors.New("journal: negative BufferSize or MaxFree")
	}
	return o, nil
}

// Journal is an append-only log of records in segment files. Its methods
// are safe for concurrent use.
type Journal struct {
	dir  string
	opts Options
	log  *slog.Logger

	// durable: every record <= durable is on disk. Read without mu by
	// Sync's fast path; stored under mu.
	durable atomic.Uint64
	// written: every record <= written is in its segment file (the page
	// cache at least), so a crash of the process cannot lose it. Under
	// mu.
	written uint64
	// failed mirrors err != nil for Sync's fast path.
	failed atomic.Bool
	syncs  atomic.Uint64 // SyncFile calls, for Stats

	mu   sync.Mutex
	cond *sync.Cond // on mu: busy cleared, durable advanced, err set

	// Guarded by mu.
	next     uint64 // sequence number of the next Append
	buf      []byte // records appended, not yet written to a segment
	rolls    []roll // segment switches inside buf
	spareBuf []byte // the previous batch's buffer, for reuse
	lepoch   uint64 // epoch of the segment the next record goes to
	lpos     int64  // offset the next record gets in that segment
	lcap     int64  // that segment's size
	busy     bool   // the writer role is held (see below)
	err      error  // poison: set once a write or sync failed
	closed   bool

	// Writer state: only the holder of the writer role (busy, taken under
	// mu) touches these, and it does so without mu, so that Append keeps
	// buffering while the holder writes and syncs.
	chain   []*segment       // live segments, oldest first; the last takes appends
	free    []*segment       // free segments, for reuse
	nextNum int              // number of the next new segment file
	spare   chan spareResult // a segment being created in the background, or nil
	wg      sync.WaitGroup   // the background creation
}

// roll is a switch to a new segment at offset at of the append buffer.
type roll struct {
	at int
	h  segHeader
}

type spareResult struct {
	s   *segment
	err error
}

// Stats are counters for tests and metrics.
type Stats struct {
	Syncs   uint64 // SyncFile calls (group commits, segment switches, recovery, Truncate)
	Durable uint64 // every record <= Durable is on disk
	Next    uint64 // the sequence number the next Append gets
}

// Open opens the journal in dir, creating dir and a first segment when
// there is none, and recovers: it finds the last valid record, drops a
// torn tail (logged), and makes what it recovered durable. Call Replay to
// read the records. Open fails with a CorruptError when committed records
// are missing or damaged. It reads every live segment, the last one to
// its end (a damaged record may hide valid ones after it), so its cost is
// that of reading the records since the last Truncate plus one segment.
func Open(dir string, opts Options) (*Journal, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("journal: open: %w", err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	segs, err := openSegments(dir)
	if err != nil {
		return nil, err
	}
	j := &Journal{dir: dir, opts: opts, log: opts.Logger, nextNum: 1}
	j.cond = sync.NewCond(&j.mu)
	if err := j.recover(segs); err != nil {
		j.waitSpare()
		closeAll(segs)
		closeAll(j.chain) // a first segment recover made; closing twice is harmless
		return nil, err
	}
	return j, nil
}

// Append adds a record and returns its sequence number. It does not wait
// for the disk: the record is durable once Sync(seq) returns. Records are
// written in sequence order.
func (j *Journal) Append(payload []byte) (uint64, error) {
	return j.append(payload, j.opts.WriteThrough)
}

// AppendDeferred is Append without the write-through (WriteThrough): the
// record waits in the buffer, in sequence order, for the next record
// written through, Write or Sync. It is for a record of use only with a
// later one, such as a commit's data record ahead of its index record
// (kvfs's store): one write then carries both, and a crash of the process
// before that write loses the data record with the record that needs it.
func (j *Journal) AppendDeferred(payload []byte) (uint64, error) {
	return j.append(payload, false)
}

func (j *Journal) append(payload []byte, through bool) (uint64, error) {
	if len(payload) > j.opts.MaxPayload {
		return 0, fmt.Errorf("journal: append %d bytes to %s: %w", len(payload), j.dir, ErrTooLarge)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable("append"); err != nil {
		return 0, err
	}
	seq := j.next
	n := int64(recOverhead + len(payload))
	if j.lpos+n > j.lcap {
		j.lepoch = newEpoch()
		j.rolls = append(j.rolls, roll{at: len(j.buf), h: segHeader{epoch: j.lepoch, firstSeq: seq}})
		j.lpos, j.lcap = segHeaderSize, j.opts.SegmentSize
	}
	j.buf = appendRecord(j.buf, seq, j.durable.Load(), j.lepoch, payload)
	j.lpos += n
	j.next++
	if through && !j.busy {
		j.busy = true
		err := j.flushLocked(false)
		j.release()
		if err != nil {
			return 0, err
		}
		return seq, nil
	}
	// Keep the buffer bounded: past BufferSize, write it out (no sync)
	// before returning, waiting for a writer in progress if need be.
	for len(j.buf) >= j.opts.BufferSize {
		if err := j.usable("append"); err != nil {
			return 0, err
		}
		if j.busy {
			j.cond.Wait()
			continue
		}
		j.busy = true
		err := j.flushLocked(false)
		if err == nil {
			err = j.writeLeftovers()
		}
		j.release()
		if err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// Write returns once every record <= seq is written to its segment file,
// without a sync: a crash of the process can no longer lose it (a crash
// of the machine still can, until Sync). If another caller is writing or
// syncing, it waits for that caller, who writes what was appended
// meanwhile (WriteThrough) or leaves the role to this one. Unlike Append
// it may wait for an fdatasync in progress, so callers call it outside
// their own locks.
func (j *Journal) Write(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		if err := j.usable("write"); err != nil {
			return err
		}
		if seq <= j.written || seq <= j.durable.Load() || seq >= j.next {
			return nil
		}
		if !j.busy {
			break
		}
		j.cond.Wait()
	}
	j.busy = true
	err := j.flushLocked(false)
	j.release()
	return err
}

// writeLeftovers, with WriteThrough, writes (without a sync) the records
// appended while this caller held the writer role, before it gives the
// role up. mu held, writer role taken.
func (j *Journal) writeLeftovers() error {
	for j.opts.WriteThrough && len(j.buf) > 0 {
		if err := j.flushLocked(false); err != nil {
			return err
		}
	}
	return nil
}

// Sync returns once every record <= seq is durable. Concurrent callers
// share fdatasyncs: one caller (the leader) writes out every record
// appended so far and syncs, the others wait for it and return if that
// covered their record, or elect the next leader. A caller whose record is
// already durable returns at once. After a failed write or sync, every
// Sync fails (ErrFailed).
func (j *Journal) Sync(seq uint64) error {
	if seq <= j.durable.Load() && !j.failed.Load() {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if seq >= j.next {
		return fmt.Errorf("journal: sync %d in %s (next is %d): %w", seq, j.dir, j.next, ErrNotAppended)
	}
	for {
		if err := j.usable("sync"); err != nil {
			return err
		}
		if seq <= j.durable.Load() {
			return nil
		}
		if !j.busy {
			break
		}
		j.cond.Wait()
	}
	j.busy = true
	err := j.flushLocked(true)
	if err == nil {
		err = j.writeLeftovers()
	}
	j.release()
	return err
}

// usable reports why the journal cannot be used, if it cannot. mu held.
func (j *Journal) usable(op string) error {
	if j.err != nil {
		return j.err
	}
	if j.closed {
		return fmt.Errorf("journal: %s %s: %w", op, j.dir, ErrClosed)
	}
	return nil
}

// takeWriter waits for the writer role and takes it, unless the journal
// cannot be used for op. mu held.
func (j *Journal) takeWriter(op string) error {
	if err := j.usable(op); err != nil {
		return err
	}
	for j.busy {
		j.cond.Wait()
	}
	j.busy = true
	return nil
}

// release gives the writer role back. mu held.
func (j *Journal) release() {
	j.busy = false
	j.cond.Broadcast()
}

// poison records the first failure: from now on the journal refuses
// work. mu held.
func (j *Journal) poison(err error) {
	if j.err == nil {
		j.err = fmt.Errorf("%w (%w)", err, ErrFailed)
		j.failed.Store(true)
		j.log.Error("journal failed; refusing further appends and syncs", "dir", j.dir, "err", err)
		j.cond.Broadcast()
	}
}

// flushLocked writes the buffered records to their segments and, if
// doSync, makes them and every earlier record durable. Called with mu
// held and the writer role taken; it drops mu during the I/O.
func (j *Journal) flushLocked(doSync bool) error {
	batch, rolls, last := j.buf, j.rolls, j.next-1
	j.buf, j.rolls, j.spareBuf = j.spareBuf[:0], nil, nil
	j.mu.Unlock()
	start := time.Now()
	err := j.write(batch, rolls)
	if err == nil {
		// Write's waiters need not wait for the sync.
		j.mu.Lock()
		j.written = max(j.written, last)
		j.cond.Broadcast()
		j.mu.Unlock()
	}
	if err == nil && doSync {
		err = j.syncDirty()
		if err == nil && j.opts.OnSync != nil {
			j.opts.OnSync(time.Since(start))
		}
	}
	j.mu.Lock()
	if cap(batch) <= 2*j.opts.BufferSize {
		j.spareBuf = batch[:0]
	}
	if err != nil {
		j.poison(err)
		return j.err
	}
	if doSync {
		j.durable.Store(last)
	}
	return nil
}

// write writes a batch of framed records, switching segments where Append
// decided to. Writer role held, mu not.
func (j *Journal) write(batch []byte, rolls []roll) error {
	pos := 0
	for _, r := range rolls {
		if err := j.writeHead(batch[pos:r.at]); err != nil {
			return err
		}
		if err := j.rollTo(r.h); err != nil {
			return err
		}
		pos = r.at
	}
	return j.writeHead(batch[pos:])
}

func (j *Journal) writeHead(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	s := j.chain[len(j.chain)-1]
	if s.end+int64(len(b)) > s.size {
		return fmt.Errorf("journal: write %s: %d bytes at %d pass the segment's end %d", s.path, len(b), s.end, s.size)
	}
	if _, err := s.f.WriteAt(b, s.end); err != nil {
		return fmt.Errorf("journal: append: %w", err)
	}
	s.end += int64(len(b))
	s.dirty = true
	return nil
}

// rollTo seals the current segment and starts the next one. The sealed
// segment is synced before the new header is written, so a header on
// disk proves that every record before its first sequence number is
// durable: only the last segment can end in a torn tail.
func (j *Journal) rollTo(h segHeader) error {
	if cur := j.chain[len(j.chain)-1]; cur.dirty {
		if err := j.syncSeg(cur); err != nil {
			return err
		}
	}
	s, err := j.takeSegment()
	if err != nil {
		return err
	}
	if err := s.writeHeader(h); err != nil {
		j.free = append(j.free, s)
		return err
	}
	j.chain = append(j.chain, s)
	return nil
}

func (j *Journal) syncSeg(s *segment) error {
	j.syncs.Add(1)
	if err := j.opts.SyncFile(s.f); err != nil {
		return &fs.PathError{Op: "fdatasync", Path: s.path, Err: err}
	}
	s.dirty = false
	return nil
}

func (j *Journal) syncDirty() error {
	for _, s := range j.chain {
		if s.dirty {
			if err := j.syncSeg(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeSegment returns a free segment of at least SegmentSize bytes: a
// recycled one, else the one made in the background, else a new one.
// Writer role held.
func (j *Journal) takeSegment() (*segment, error) {
	var s *segment
	switch {
	case len(j.free) > 0:
		s, j.free = j.free[0], j.free[1:]
		if err := s.ensureSize(j.opts.SegmentSize, j.opts.SyncFile); err != nil {
			j.free = append(j.free, s)
			return nil, err
		}
	case j.spare != nil:
		res := <-j.spare
		j.spare = nil
		if res.err == nil {
			s = res.s
			break
		}
		// Made in the background, maybe on a disk that has had room
		// made since: try again now.
		fallthrough
	default:
		var err error
		if s, err = j.createNow(); err != nil {
			return nil, err
		}
	}
	j.prepareSpare()
	return s, nil
}

// createNow makes a new segment, asking NoSpace for room once if the disk
// is full. Writer role held.
func (j *Journal) createNow() (*segment, error) {
	s, err := createSegment(j.dir, j.nextNum, j.opts.SegmentSize, j.opts.SyncFile)
	if errors.Is(err, syscall.ENOSPC) && j.opts.NoSpace != nil && j.opts.NoSpace(err) {
		s, err = createSegment(j.dir, j.nextNum, j.opts.SegmentSize, j.opts.SyncFile)
	}
	if err != nil {
		return nil, err
	}
	j.nextNum++
	return s, nil
}

// prepareSpare starts making a new segment in the background when there
// is no free one, so that a segment switch does not wait for SegmentSize
// bytes of zeros to reach the disk. Writer role held.
func (j *Journal) prepareSpare() {
	if len(j.free) > 0 || j.spare != nil {
		return
	}
	ch := make(chan spareResult, 1)
	j.spare = ch
	num := j.nextNum
	j.nextNum++
	j.wg.Go(func() {
		s, err := createSegment(j.dir, num, j.opts.SegmentSize, j.opts.SyncFile)
		ch <- spareResult{s, err}
	})
}

// Ready waits until the segment made ahead in the background (the next
// one the log will switch to) is on disk. A new segment is written whole
// (zeros, then an fsync), tens of MiB: made while the first syncs run, it
// competes with them for the disk, and a switch that comes before it is
// done waits for it. Calling Ready once after Open moves that wait out of
// the way of the first commits. An error (a full disk) leaves the segment
// to be made again at the switch.
func (j *Journal) Ready() error {
	j.mu.Lock()
	if err := j.takeWriter("ready"); err != nil {
		j.mu.Unlock()
		return err
	}
	j.mu.Unlock()
	var err error
	if j.spare != nil {
		res := <-j.spare
		j.spare = nil
		if err = res.err; err == nil {
			j.free = append(j.free, res.s)
		}
	}
	j.mu.Lock()
	j.release()
	j.mu.Unlock()
	return err
}

// waitSpare waits for the background segment and closes it (it stays on
// disk, free). Writer role held or journal not shared.
func (j *Journal) waitSpare() {
	if j.spare != nil {
		if res := <-j.spare; res.s != nil {
			res.s.f.Close()
		}
		j.spare = nil
	}
	j.wg.Wait()
}

// Replay calls fn for each record with a sequence number above after, in
// order: those recovered by Open and those appended since. payload is
// valid only during the call. fn must not call the Journal's methods.
// A record that no longer verifies is a CorruptError; an error from fn
// stops the replay and is returned as is.
func (j *Journal) Replay(after uint64, fn func(seq uint64, payload []byte) error) error {
	j.mu.Lock()
	if err := j.takeWriter("replay"); err != nil {
		j.mu.Unlock()
		return err
	}
	var err error
	if len(j.buf) > 0 {
		err = j.flushLocked(false)
	}
	j.mu.Unlock()
	if err == nil {
		err = j.replay(after, fn)
	}
	j.mu.Lock()
	if err == nil {
		err = j.writeLeftovers()
	}
	j.release()
	j.mu.Unlock()
	return err
}

func (j *Journal) replay(after uint64, fn func(seq uint64, payload []byte) error) error {
	r := &segReader{}
	for i, s := range j.chain {
		if i+1 < len(j.chain) && j.chain[i+1].firstSeq-1 <= after {
			continue
		}
		r.s, r.buf = s, r.buf[:0]
		seq := s.firstSeq
		for off := int64(segHeaderSize); off < s.end; seq++ {
			h, payload, ok, err := r.record(off, s.epoch, j.opts.MaxPayload)
			if err != nil {
				return err
			}
			if !ok || h.seq != seq {
				return &CorruptError{Path: s.path, Offset: off, Seq: seq, Reason: "a recovered record no longer verifies"}
			}
			if seq > after {
				if err := fn(seq, payload); err != nil {
					return err
				}
			}
			off += recOverhead + int64(h.length)
		}
	}
	return nil
}

// Truncate declares the records <= upto no longer needed (the caller has
// checkpointed them elsewhere): every segment whose records all lie at or
// below upto becomes free for reuse. The segment taking appends is kept,
// so sequence numbers go on across reopen. Freed segments are marked
// (header zeroed and synced) oldest first, so a crash leaves the live
// segments contiguous.
func (j *Journal) Truncate(upto uint64) error {
	j.mu.Lock()
	if err := j.takeWriter("truncate"); err != nil {
		j.mu.Unlock()
		return err
	}
	j.mu.Unlock()
	err := j.truncate(upto)
	j.mu.Lock()
	if err != nil {
		j.poison(err)
		err = j.err
	} else {
		err = j.writeLeftovers()
	}
	j.release()
	j.mu.Unlock()
	return err
}

func (j *Journal) truncate(upto uint64) error {
	for len(j.chain) > 1 && j.chain[1].firstSeq-1 <= upto {
		s := j.chain[0]
		if _, err := s.f.WriteAt(make([]byte, segHeaderSize), 0); err != nil {
			return fmt.Errorf("journal: truncate: %w", err)
		}
		if err := j.syncSeg(s); err != nil {
			return err
		}
		j.chain = j.chain[1:]
		s.epoch, s.firstSeq, s.end = 0, 0, 0
		j.free = append(j.free, s)
	}
	if len(j.free) <= j.opts.MaxFree {
		return nil
	}
	for len(j.free) > j.opts.MaxFree {
		s := j.free[len(j.free)-1]
		j.free = j.free[:len(j.free)-1]
		s.f.Close()
		if err := os.Remove(s.path); err != nil {
			return fmt.Errorf("journal: truncate: %w", err)
		}
	}
	return syncDir(j.dir)
}

// Close writes and syncs the buffered records and closes the segments.
// After a failure it only closes, and returns the failure.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	for j.busy {
		j.cond.Wait()
	}
	j.busy = true
	var err error
	if j.err == nil && (len(j.buf) > 0 || j.durable.Load() < j.next-1) {
		err = j.flushLocked(true)
	} else if j.err != nil {
		err = j.err
	}
	j.closed = true
	j.mu.Unlock()
	j.waitSpare()
	closeAll(j.chain)
	closeAll(j.free)
	j.mu.Lock()
	j.release()
	j.mu.Unlock()
	return err
}

// Stats returns the journal's counters.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Stats{Syncs: j.syncs.Load(), Durable: j.durable.Load(), Next: j.next}
}
