package fs

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"github.com/kvfs/kvfs/store"
)

// zeroBlock fills the zero runs of a spliced reply.
var zeroBlock = make([]byte, 64<<10)

// canSplice reports whether the kernel lets pipes grow, which splicing
// replies needs. go-fuse decides the same way whether to splice at all.
var canSplice = splice.Resizable()

// A spliced reply must carry every byte asked for. go-fuse splices a reply
// by growing a pipe of its own to header+payload+one page (no further than
// fs.pipe-max-size, as read when the process started), writing the header
// into it and splicing the payload in behind it; whatever does not fit is
// left out, and go-fuse sends the shorter reply, which the kernel takes as
// the end of the file. A pipe holds a number of buffers (its size in
// pages), not bytes: a spliced range of a file takes one buffer per page
// it touches, so a range that starts inside a page takes one more buffer
// than its length in pages, and a reply of several such ranges can need
// more buffers than the pipe has although its bytes fit. spliceResult
// therefore splices only replies whose buffers provably fit (spliceFits),
// checks every byte count it gets back, and otherwise lets the reply be
// copied.

// fuseHeaderBytes is the size of a FUSE reply header (struct
// fuse_out_header), which go-fuse writes into its pipe ahead of a read's
// payload, taking one buffer.
const fuseHeaderBytes = 16

// pipeBuffers is an upper bound on the pipe buffers that segs take once
// spliced or written into a pipe: one per page touched by a pack range,
// and for a run of zeros (written from memory, a page per buffer) one per
// page of its length plus one, in case the write starts a new buffer
// without filling the one before.
func pipeBuffers(segs []store.Segment, page int) int {
	n := 0
	for _, s := range segs {
		if s.Fd != nil {
			n += ceilDiv(int(s.Off%int64(page))+s.Len, page)
		} else {
			n += ceilDiv(s.Len, page) + 1
		}
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// pipeSlots is the number of buffers of the smallest pipe that holds n
// bytes: pipe sizes are powers of two pages (F_SETPIPE_SZ rounds up).
func pipeSlots(n, page int) int {
	size := page
	for size < n {
		size *= 2
	}
	return size / page
}

// spliceFits reports whether go-fuse can splice a reply of total bytes
// that takes bufs pipe buffers without leaving any out: its pipe, grown
// to fuseHeaderBytes+total+page bytes within maxPipe, must hold the
// header's buffer and all of the payload's.
func spliceFits(bufs, total, page, maxPipe int) bool {
	need := fuseHeaderBytes + total + page
	return need <= maxPipe && 1+bufs <= pipeSlots(need, page)
}

// spliceResult answers a read of total bytes, mapped to segs, without
// copying its bytes through this process: one pack range is spliced by
// go-fuse from the pack file (fdResult), several are spliced into a pipe
// of ours, zero runs written into it, and the pipe spliced into the reply.
// It takes over segs: they are released when the reply has been sent, or
// before it returns nil, when the reply cannot be spliced in full; the
// caller then copies.
func spliceResult(segs *store.Segments, total int) fuse.ReadResult {
	page := os.Getpagesize()
	bufs := pipeBuffers(segs.List, page)
	if len(segs.List) == 0 || !spliceFits(bufs, total, page, splice.MaxPipeSize()) {
		segs.Release()
		return nil
	}
	if s := segs.List[0]; len(segs.List) == 1 && s.Fd != nil {
		return &fdResult{segs: segs, fd: s.Fd.Fd(), off: s.Off, n: s.Len}
	}
	// The pipe holds references to the pages spliced into it: the packs'
	// descriptors are not needed once it is filled.
	defer segs.Release()
	pair, err := splice.Get()
	if err != nil {
		return nil
	}
	if err := pair.Grow(max(total, bufs*page)); err != nil || pair.Cap()/page < bufs {
		splice.Done(pair)
		return nil
	}
	for _, s := range segs.List {
		if !fillPipe(pair, s) {
			splice.Drop(pair) // holds partial data: never reuse it
			return nil
		}
	}
	return fuse.ReadResultPipe(pair, total)
}

// fillPipe splices or writes one segment into pair, which has room for
// all of it, and reports whether every byte went in. A pack range is
// spliced in one call: one that moves less (the pack ends early, an I/O
// error) is not continued, since a continuation would take one more
// buffer than counted; the read is copied instead, and reports the error.
func fillPipe(pair *splice.Pair, s store.Segment) bool {
	if s.Fd != nil {
		n, err := pair.LoadFromAt(s.Fd.Fd(), s.Len, s.Off)
		return err == nil && n == s.Len
	}
	for left := s.Len; left > 0; {
		k := min(left, len(zeroBlock))
		n, err := pair.Write(zeroBlock[:k])
		if err != nil || n != k {
			return false
		}
		left -= k
	}
	return true
}

// fdResult is a reply of one pack range, which go-fuse splices from the
// pack file into its pipe after Read has returned. It holds the pack's
// descriptor until go-fuse calls Done, once the reply is sent, so that the
// descriptor cannot be closed, and its number reused for another file,
// while go-fuse uses it. go-fuse finds it splicable by its Seekable
// method; where it does not splice, it copies through Bytes.
type fdResult struct {
	segs *store.Segments
	fd   uintptr
	off  int64
	n    int
}

// Seekable is the range go-fuse splices.
func (r *fdResult) Seekable() (fd uintptr, off int64, sz int) { return r.fd, r.off, r.n }

// Size is the reply's length.
func (r *fdResult) Size() int { return r.n }

// Bytes reads the whole range into buf (or a larger buffer), for a reply
// that is not spliced. A pack that ends before the range is EIO, never a
// short reply.
func (r *fdResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < r.n {
		buf = make([]byte, r.n)
	}
	buf = buf[:r.n]
	for done := 0; done < r.n; {
		k, err := syscall.Pread(int(r.fd), buf[done:], r.off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, fuse.ToStatus(err)
		}
		if k == 0 {
			return nil, fuse.EIO
		}
		done += k
	}
	return buf, fuse.OK
}

// Done releases the pack's descriptor.
func (r *fdResult) Done() { r.segs.Release() }

const pipeMaxSize = "/proc/sys/fs/pipe-max-size"

// PipeWant is the pipe size that a spliced read reply needs: a whole
// request plus its header.
const PipeWant = requestBytes + 64<<10

func pipeLimit() int {
	b, err := os.ReadFile(pipeMaxSize)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// PipeMaxSize is the pipe size limit that replies are spliced within:
// fs.pipe-max-size as go-fuse read it when the process started.
func PipeMaxSize() int { return splice.MaxPipeSize() }

// RaisePipeLimit raises the system's pipe size limit (fs.pipe-max-size,
// 1 MiB by default) so that a full read reply (1 MiB and its header) can
// be spliced instead of copied. It needs root, and
// takes effect in processes started afterwards (go-fuse reads the limit
// at start-up): the daemon calls it before it starts. It reports whether
// it changed the limit.
func RaisePipeLimit(log *slog.Logger) bool {
	cur := pipeLimit()
	if cur == 0 || cur >= PipeWant {
		return false
	}
	size := 2 << 20
	for size < PipeWant {
		size *= 2
	}
	if err := os.WriteFile(pipeMaxSize, []byte(strconv.Itoa(size)), 0o644); err != nil {
		log.Info("reads will be copied, not spliced: the pipe size limit is below a read reply", "limit", cur, "want", PipeWant)
		return false
	}
	log.Info("raised fs.pipe-max-size so that reads can be spliced", "from", cur, "to", size)
	return true
}
