package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A user's mount is made by fusermount3, the setuid helper, which go-fuse
// runs. When it refuses, go-fuse reports "fusermount exited with code
// 256": a wait status, not the exit code (1), and not why; fusermount3
// said why on its standard error (the terminal, or the daemon's log).
// explainFusermount says it all: the exit code, fusermount3's words and
// the likely fix.

// fusermountFailed matches go-fuse's report (fuse/mount_linux.go).
var fusermountFailed = regexp.MustCompile(`fusermount exited with code (\d+)`)

// explainFusermount rewrites err if it is go-fuse's report of a failed
// fusermount3: said are fusermount3's own lines (from the daemon's log),
// nil when they went to the terminal already. Other errors are returned
// as they are.
func explainFusermount(err error, said []string) error {
	if err == nil {
		return nil
	}
	m := fusermountFailed.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	how := "failed"
	if ws, perr := strconv.Atoi(m[1]); perr == nil {
		// A wait status: the exit code is its second byte, a signal its
		// low seven bits.
		if sig := ws & 0x7f; sig != 0 {
			how = fmt.Sprintf("was killed by signal %d", sig)
		} else {
			how = fmt.Sprintf("failed with exit code %d", ws>>8)
		}
	}
	words := strings.Join(said, "\n")
	msg := "fusermount3 (which mounts FUSE for users other than root) " + how
	if words != "" {
		msg += ":\n" + words
	} else {
		msg += " (its message is above)"
	}
	return errors.New(msg + "\n" + fusermountFix(words))
}

// fusermountFix is the likely fix for what fusermount3 said (words; ""
// when it is not known).
func fusermountFix(words string) string {
	devFuse := "/dev/fuse must exist and be readable and writable by you: see ls -l /dev/fuse (usually crw-rw-rw-); root can fix it with chmod 0666 /dev/fuse (or modprobe fuse if it is missing), and a container needs it passed in (docker run --device /dev/fuse)"
	mountPoint := "you need write access to the mount point: mount on a directory you own (mkdir -p ~/kvfs-mnt), or have its owner give it to you (chown)"
	switch {
	case strings.Contains(words, "/dev/fuse"):
		return "Fix: " + devFuse + "."
	case strings.Contains(words, "mountpoint") || strings.Contains(words, "mount point"):
		return "Fix: " + mountPoint + "."
	case strings.Contains(words, "user_allow_other"):
		return "Fix: ask root to add a line user_allow_other to /etc/fuse.conf, or mount without -o allow_other."
	case strings.Contains(words, "Operation not permitted"):
		return "Fix: fusermount3 must be setuid root (ls -l $(command -v fusermount3) shows -rwsr-xr-x; reinstall fuse3), and a container must allow FUSE mounts; or mount as root."
	}
	return "The usual causes: " + devFuse + "; or " + mountPoint + "."
}
