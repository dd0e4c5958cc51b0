package fs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawReplies is the go-fuse bridge with changes that the node API cannot
// make, each sparing a round trip to the daemon:
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
//   - Writes that carry FUSE_WRITE_KILL_SUIDGID (with killpriv: the kernel
//     sends it on every write by a caller without CAP_FSETID) clear the
//     file's set-ID bits (see Write), which go-fuse's Write does not pass
//     on: the price of the kernel no longer asking for security.capability
//     before each write(2).
type rawReplies struct {
	fuse.RawFileSystem
	attrTimeout time.Duration
	// killpriv: FUSE_HANDLE_KILLPRIV_V2 was negotiated (FS.killpriv).
	killpriv bool
	// darwinPages: opens keep the kernel's pages as macFUSE does
	// (Options.SimulateDarwin, darwinPageCache).
	darwinPages bool
}

// Write clears the file's set-ID bits before a write that asks for it, as
// the kernel did itself before FUSE_HANDLE_KILLPRIV_V2: go-fuse's node API
// does not pass the write's flags on, so the kill goes to the node as the
// setattr that means the same, FATTR_KILL_SUIDGID alone (which the kernel
// never sends; fileNode.Setattr takes it as a kill and nothing else). It
// costs a read of the inode per such write and a transaction only when a
// set-ID bit is set (killPrivs). security.capability needs no dropping:
// kvfs stores no security.* attribute (checkSettable).
//
// Opens need nothing of the kind: kvfs does not negotiate atomic O_TRUNC,
// so the kernel takes O_TRUNC out of an OPEN and never sets
// FUSE_OPEN_KILL_SUIDGID there; it truncates with a SETATTR, which carries
// FATTR_KILL_SUIDGID. A CREATE's flag concerns a file that exists, and a
// kvfs CREATE makes a new one.
func (r *rawReplies) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if st := r.kill(cancel, in); st != fuse.OK {
		return 0, st
	}
	return r.RawFileSystem.Write(cancel, in, data)
}

// Writev is what go-fuse calls for every write (Write only if this says
// ENOSYS, for data in several pieces: then both kill, the second finding
// nothing to do).
func (r *rawReplies) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if st := r.kill(cancel, in); st != fuse.OK {
		return 0, st
	}
	return r.RawFileSystem.Writev(cancel, in, data)
}

// kill passes a write's FUSE_WRITE_KILL_SUIDGID on to the file (see Write).
func (r *rawReplies) kill(cancel <-chan struct{}, in *fuse.WriteIn) fuse.Status {
	if !r.killpriv || in.WriteFlags&fuse.WRITE_KILL_SUIDGID == 0 {
		return fuse.OK
	}
	kill := fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: in.InHeader,
		Valid: fuse.FATTR_KILL_SUIDGID | fuse.FATTR_FH, Fh: in.Fh}}
	var out fuse.AttrOut
	return r.RawFileSystem.SetAttr(cancel, &kill, &out)
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
	if st == fuse.OK && r.darwinPages {
		out.OpenFlags = darwinPageCache(out.OpenFlags)
	}
	return st
}
