package fs

import (
	"slices"
	"strings"
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

// notifyViews drops the kernel's entries for the views of the file n, in
// /.kvfs/whole and /.kvfs/prefix (PATH@N), after a commit of n. A view
// node shows one version, and the kernel may keep its entry for a jiffy
// (the entry timeout, a nanosecond, rounds up): an open of the view made
// after the commit then reused the entry of the version before, which
// the daemon serves to an open that follows a recent lookup (walks.go),
// and read the old bytes (TestWholeViewFollowsCommits, once in CI). Only
// the views the kernel knows of are walked; it is called, as
// notifyContent, once the commit's lock is released.
func (fsys *FS) notifyViews(n *gofs.Inode) {
	if !fsys.notify {
		return
	}
	var comps []string
	p := n
	for {
		name, parent := p.Parent()
		if parent == nil {
			break
		}
		comps = append(comps, name)
		p = parent
	}
	if !p.IsRoot() || len(comps) == 0 {
		return // unlinked, or not reachable from the root
	}
	slices.Reverse(comps)
	ctl := p.GetChild(ctlName)
	if ctl == nil {
		return
	}
	name := comps[len(comps)-1]
	for _, tree := range []string{"whole", "prefix"} {
		dir := ctl.GetChild(tree)
		for _, c := range comps[:len(comps)-1] {
			if dir == nil {
				break
			}
			dir = dir.GetChild(c)
		}
		if dir == nil {
			continue
		}
		for child := range dir.Children() {
			if child == name || tree == "prefix" && strings.HasPrefix(child, name+"@") {
				dir.NotifyEntry(child)
			}
		}
	}
}
