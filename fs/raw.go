package fs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawReplies is the go-fuse bridge with two changes to its replies that
// the node API cannot make, each sparing a round trip to the daemon:
//
//   - SETATTR replies get the mount's attribute timeout, as GETATTR's do
//     (go-fuse sets none there): the attributes of every chmod, chown,
//     utimes and truncate expired at once, and the next stat of the file
//     asked again. The reply describes the inode as the change left it,
//     as a GETATTR would.
//   - Read-only opens get FOPEN_NOFLUSH: the kernel sends no FLUSH at
//     their close(2). Only write handles have work to do at a flush (the
//     commit, writer.Flush); read handles — the files' (reader) and the
//     /.kvfs views' — have none (TestReadHandlesDoNotFlush), and without
//     FUSE_POSIX_LOCKS (Options.EnableLocks) there is no lock owner to
//     tell. With a writeback cache the kernel ignores the flag.
type rawReplies struct {
	fuse.RawFileSystem
	attrTimeout time.Duration
}

func (r *rawReplies) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := r.RawFileSystem.SetAttr(cancel, in, out)
	if st == fuse.OK && out.Timeout() == 0 {
		out.SetTimeout(r.attrTimeout)
	}
	return st
}

func (r *rawReplies) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := r.RawFileSystem.Open(cancel, in, out)
	if st == fuse.OK && in.Flags&syscall.O_ACCMODE == syscall.O_RDONLY && in.Flags&syscall.O_TRUNC == 0 {
		out.OpenFlags |= fuse.FOPEN_NOFLUSH
	}
	return st
}
