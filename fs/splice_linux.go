package fs

import (
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/splice"
	"github.com/kvfs/kvfs/store"
)

// zeroBlock fills the zero runs of a spliced reply.
var zeroBlock = make([]byte, 64<<10)

// spliceResult answers a read without copying its bytes through this
// process: one pack range is spliced by the kernel from the pack file
// (fuse.ReadResultFd); several ranges are spliced into a pipe, zero runs
// written into it, and the pipe spliced into the reply. It returns nil
// when splicing fails, and the caller copies instead.
func spliceResult(segs []store.Segment, total int) fuse.ReadResult {
	if len(segs) == 1 && segs[0].Fd != nil {
		return fuse.ReadResultFd(segs[0].Fd.Fd(), segs[0].Off, segs[0].Len)
	}
	pair, err := splice.Get()
	if err != nil {
		return nil
	}
	if err := pair.Grow(total); err != nil {
		splice.Done(pair)
		return nil
	}
	for _, s := range segs {
		for left := s.Len; left > 0; {
			var n int
			var err error
			if s.Fd == nil {
				n, err = pair.Write(zeroBlock[:min(left, len(zeroBlock))])
			} else {
				n, err = pair.LoadFromAt(s.Fd.Fd(), left, s.Off+int64(s.Len-left))
			}
			if err != nil || n <= 0 {
				splice.Drop(pair) // holds partial data: never reuse it
				return nil
			}
			left -= n
		}
	}
	return fuse.ReadResultPipe(pair, total)
}

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

// canSplice reports whether pipes can hold a read reply. go-fuse reads the
// limit once, when the process starts; so does this.
var canSplice = pipeLimit() >= PipeWant

// RaisePipeLimit raises the system's pipe size limit (fs.pipe-max-size,
// 1 MiB by default) so that go-fuse can splice a full read reply instead
// of failing, copying and logging for every request. It needs root, and
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
