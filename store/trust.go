package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// kvfs works only on its own user's stores. A store directory belongs to
// its owner, who may put anything in it — a symbolic link named kvfs.log,
// reserve, spool or packs/000001.pack that leads to another user's file —
// and a process of another user that opened the store would append to,
// truncate, fallocate, empty or serve that file with its own rights: root
// serving a user's store would give the user root's files. So a store must
// belong to the user who opens it (as git refuses a repository of another
// owner), and the path to it must be one that no third user can change (as
// ssh's StrictModes checks a user's home): every directory on it, and
// every symbolic link it passes through, must be this user's or root's,
// and a directory that others may write must be sticky (as /tmp), where
// only an entry's owner may replace it. Root initialising a store for a
// user (InitAs) gives it away at the end and does not open it again.

// ErrNotOwner is returned by Open and Init for a store (or a directory
// or link on the way to it) that another user controls.
var ErrNotOwner = errors.New("controlled by another user")

// maxLinks bounds the symbolic links followed, as the kernel's ELOOP.
const maxLinks = 40

// TrustedDir returns the real path of dir, a store directory or one to be
// made, if this process may trust it: dir (if it exists) belongs to this
// process's user, and no other user (but root) can change what the path
// leads to. The error names the directory or link and its owner. The store
// then works under the real path, not through links that could change.
func TrustedDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	euid := uint32(os.Geteuid())
	trusted := func(uid uint32) bool { return uid == 0 || uid == euid }
	// Walk the path as the kernel would, one name at a time, checking
	// each entry's directory and, where the directory is shared (sticky),
	// the entry's own owner.
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	cur := "/"
	curSt, err := lstatSys(cur)
	if err != nil {
		return "", err
	}
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur is a real path: no link in it
			if curSt, err = lstatSys(cur); err != nil {
				return "", err
			}
			continue
		}
		next := filepath.Join(cur, name)
		st, err := lstatSys(next)
		if errors.Is(err, fs.ErrNotExist) {
			// The rest is to be made (init), by this process, in cur.
			if err := trustedDirSt(cur, curSt, trusted); err != nil {
				return "", err
			}
			return filepath.Join(append([]string{next}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if err := trustedDirSt(cur, curSt, trusted); err != nil {
			return "", err
		}
		if curSt.Mode&0o022 != 0 && !trusted(st.Uid) {
			// In a sticky directory that others may write, an entry's
			// owner may replace it.
			return "", fmt.Errorf("%s belongs to uid %d, in %s that others may write to (%w): that user could point it elsewhere", next, st.Uid, cur, ErrNotOwner)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			if links++; links > maxLinks {
				return "", &fs.PathError{Op: "resolve", Path: abs, Err: syscall.ELOOP}
			}
			if !trusted(st.Uid) {
				return "", fmt.Errorf("link %s belongs to uid %d (%w): that user could point it elsewhere", next, st.Uid, ErrNotOwner)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if filepath.IsAbs(target) {
				cur = "/"
				if curSt, err = lstatSys(cur); err != nil {
					return "", err
				}
			}
			rest = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest...)
			continue
		}
		cur, curSt = next, st
	}
	if curSt.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return "", &fs.PathError{Op: "open store", Path: cur, Err: syscall.ENOTDIR}
	}
	if curSt.Uid != euid {
		return "", fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): kvfs works only on its own user's stores (%w); run kvfs as uid %d", cur, curSt.Uid, euid, ErrNotOwner, curSt.Uid)
	}
	return cur, nil
}

// trustedDirSt checks a directory on the way to a store: this user's or
// root's, and not writable by others unless sticky.
func trustedDirSt(d string, st *syscall.Stat_t, trusted func(uint32) bool) error {
	if st == nil {
		var err error
		if st, err = lstatSys(d); err != nil {
			return err
		}
	}
	if !trusted(st.Uid) {
		return fmt.Errorf("%s, on the way to the store, belongs to uid %d (%w): that user could replace the store; move the store or run kvfs as uid %d", d, st.Uid, ErrNotOwner, st.Uid)
	}
	if st.Mode&0o022 != 0 && st.Mode&syscall.S_ISVTX == 0 {
		return fmt.Errorf("%s, on the way to the store, is writable by its group or others (mode %04o) without the sticky bit (%w): another user could replace the store; chmod go-w it", d, st.Mode&0o7777, ErrNotOwner)
	}
	return nil
}

func lstatSys(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return &st, nil
}
