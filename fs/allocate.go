package fs

import (
	"context"
	"strconv"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// allocBit names one bit of a fallocate request's mode.
type allocBit struct {
	bit  uint32
	name string
}

// linuxAlloc is fallocate(2)'s mode (linux/falloc.h).
func linuxAlloc() []allocBit {
	return []allocBit{
		{0x01, "KEEP_SIZE"}, {0x02, "PUNCH_HOLE"}, {0x04, "NO_HIDE_STALE"},
		{0x08, "COLLAPSE_RANGE"}, {0x10, "ZERO_RANGE"}, {0x20, "INSERT_RANGE"},
		{0x40, "UNSHARE_RANGE"}, {0x80, "WRITE_ZEROES"},
	}
}

// darwinAlloc is VNOP_ALLOCATE's flags (sys/vnode.h), which fcntl's
// F_PREALLOCATE builds from fstore_t (F_ALLOCATECONTIG, F_ALLOCATEALL,
// F_ALLOCATEPERSIST; F_PEOFPOSMODE and F_VOLPOSMODE become the FROM bits)
// and macFUSE forwards as the mode. The same bit means different things:
// darwin's 0x2 (contiguous) is Linux's PUNCH_HOLE, which is why a mode is
// read with its platform's table and never with Linux's alone.
func darwinAlloc() []allocBit {
	return []allocBit{
		{0x01, "PREALLOCATE"}, {0x02, "ALLOCATECONTIG"}, {0x04, "ALLOCATEALL"},
		{0x08, "ALLOCATEPERSIST"}, {0x10, "ALLOCATEFROMPEOF"}, {0x20, "ALLOCATEFROMVOL"},
	}
}

// decodeAllocate reads a fallocate mode with the platform's table, for
// the log: the names of its bits ("allocate" for none, which on Linux
// extends the file), and unknown bits in hex. The answer is ENOTSUP
// whatever the mode asks, on every platform: a kvfs file's bytes become
// content-addressed chunks when it is committed, so space reserved ahead
// of the writes reserves nothing, and holes are punched (in packs) by
// the store, never through the mount. posix_fallocate(3) then writes
// zeros instead on Linux; on macOS F_PREALLOCATE fails with ENOTSUP, as
// on other volumes without preallocation (and macFUSE sends no fallocate
// at all unless the daemon asks for FUSE_ALLOCATE at init, which go-fuse
// does not).
func decodeAllocate(mode uint32, bits []allocBit) (what string, errno syscall.Errno) {
	var names []string
	for _, b := range bits {
		if mode&b.bit != 0 {
			names = append(names, b.name)
			mode &^= b.bit
		}
	}
	if mode != 0 {
		names = append(names, "0x"+strconv.FormatUint(uint64(mode), 16))
	}
	if len(names) == 0 {
		return "allocate", syscall.ENOTSUP
	}
	return strings.Join(names, "|"), syscall.ENOTSUP
}

var _ = (gofs.NodeAllocater)((*fileNode)(nil))

// Allocate answers fallocate(2) (and F_PREALLOCATE on macOS) as
// decodeAllocate says, and says what was asked in the debug log. Without
// it go-fuse answered the same ENOTSUP, unlogged.
func (f *fileNode) Allocate(ctx context.Context, fh gofs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	what, e := decodeAllocate(mode, hostPlatform().alloc)
	f.fsys.log.Debug("fallocate refused", "ino", f.ino.Load(), "mode", what, "off", off, "len", size, "errno", e)
	return e
}
