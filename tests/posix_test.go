//go:build linux

package tests

import (
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixCases are go-fuse's POSIX conformance cases that apply to kvfs.
// Left out, because kvfs does not support what they test: hard links and
// symlinks (Link, LinkUnlinkRename, SymlinkReadlink, SetattrSymlink,
// OpenSymlinkRace), byte-range locks (FcntlFlock*), fallocate, and
// seeking holes (Lseek*).
var posixCases = []string{
	"AppendWrite", "DirSeek", "FileBasic", "FileLarge", "FstatDeleted", "MkdirRmdir",
	"OpenAt", "ParallelFileOpen", "ReadDirBasic", "ReadDirConsistency", "RenameOpenDir",
	"RenameOverwriteDestExist", "RenameOverwriteDestNoExist", "TruncateFile", "TruncateNoFile",
	"XAttr", "FdLeak", "NlinkZero", "DirectIO",
}

func TestPosix(t *testing.T) {
	for _, name := range posixCases {
		fn, ok := posixtest.All[name]
		if !ok {
			t.Fatalf("posixtest has no case %s", name)
		}
		t.Run(name, func(t *testing.T) {
			m := newMount(t)
			fn(t, m.mnt)
		})
	}
}
