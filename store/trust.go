package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// kvfs works only on its own user's stores. A store directory belongs to
// its owner, who may put anything in it — a symbolic link named kvfs.log,
// reserve, spool or packs/000001.pack that leads to another user's file —
// and a process of another user that opened the store would append to,
// truncate, fallocate, empty or serve that file with its own rights: root
// serving a user's store would give the user root's files. So a store must
// belong to the user who opens it (as git refuses a repository of another
// owner), and no directory above it may be writable by a third user, who
// could swap the store for one of their own between two path lookups (as
// ssh's StrictModes checks a user's home). Root initialising a store for
// a user (InitAs) gives it away at the end and does not open it again.

// ErrNotOwner is returned by Open and Init for a store (or a directory
// above it) that another user controls.
var ErrNotOwner = errors.New("controlled by another user")

// TrustedDir returns the real path of dir, a store directory or one to be
// made, if it and every directory above it may be trusted by this process:
// dir (if it exists) belongs to this process's user, and each directory
// above it belongs to that user or to root and is not writable by others
// unless sticky (as /tmp). The error names the directory and its owner.
// The store then works under the real path, not through links that could
// change.
func TrustedDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	// The store's own path may pass through symbolic links that its
	// user made (a store on another disk): what is checked is where
	// they lead.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	euid := uint32(os.Geteuid())
	if st, err := lstatSys(abs); err == nil {
		if st.Uid != euid {
			return "", fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): kvfs works only on its own user's stores (%w); run kvfs as uid %d", abs, st.Uid, euid, ErrNotOwner, st.Uid)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		st, err := lstatSys(d)
		if err == nil {
			if st.Uid != 0 && st.Uid != euid {
				return "", fmt.Errorf("%s, above the store, belongs to uid %d (%w): that user could replace the store; move the store or run kvfs as uid %d", d, st.Uid, ErrNotOwner, st.Uid)
			}
			if st.Mode&0o022 != 0 && st.Mode&syscall.S_ISVTX == 0 {
				return "", fmt.Errorf("%s, above the store, is writable by its group or others (mode %04o) without the sticky bit (%w): another user could replace the store; chmod go-w it", d, st.Mode&0o7777, ErrNotOwner)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if d == filepath.Dir(d) {
			return abs, nil
		}
	}
}

func lstatSys(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return &st, nil
}
