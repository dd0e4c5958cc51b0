package fs

import (
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// Every notification kvfs sends the kernel goes through here, so that a
// mount without them (macFUSE, where go-fuse sends none, or Linux
// simulating it: Options.SimulateDarwin) is one switch, FS.notify, and
// nothing in kvfs can rely on a notification that the darwin build does
// not send. They are sent outside request handlers (a handler waiting on
// the kernel that waits on it deadlocks): from the control socket's
// handlers, eviction, and fileNode.unlock once f.mu is released.

// notifyEntry tells the kernel that the entry name of parent changed
// outside the mount (Server.Invalidate); without notifications the kernel
// sees the change once its entry expires (Options.Timeout).
func (fsys *FS) notifyEntry(parent *gofs.Inode, name string) syscall.Errno {
	if !fsys.notify {
		return syscall.ENOSYS
	}
	return parent.NotifyEntry(name)
}

// notifyContent tells the kernel that n's attributes and cached pages are
// stale (fileNode.unlock, after a commit); without notifications the next
// open of a new version drops the pages (opencache.go) and the attributes
// expire within Options.Timeout.
func (fsys *FS) notifyContent(n *gofs.Inode) syscall.Errno {
	if !fsys.notify {
		return syscall.ENOSYS
	}
	return n.NotifyContent(0, 0)
}
