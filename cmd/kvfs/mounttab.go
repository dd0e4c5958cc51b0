package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// The system's mount table, read so that kvfs refuses what would surprise
// a user: mounting over a live kvfs mount (which hides it), a second
// mount of a store that is mounted already (found by where, not by a lock
// timeout), unmounting a filesystem that is not kvfs, and commands given
// a mount point where they want the store.

// mountEntry is one mount of the system's table.
type mountEntry struct {
	Point  string // where it is mounted
	FSType string // "fuse.kvfs", "tmpfs", "macfuse", ...
	Source string // for kvfs, the store's directory (the FUSE fsname)
}

// poolFsName is a pool mount's source (fs/poolfs's FsName): its type is
// fuse.kvfs too.
const poolFsName = "kvfs-pool"

// isKvfs reports whether e is a kvfs mount: of type fuse.kvfs (Linux), or
// a FUSE mount whose source is a kvfs store (macFUSE names no subtype).
func (e mountEntry) isKvfs() bool {
	if e.FSType == "fuse.kvfs" {
		return true
	}
	if !strings.Contains(e.FSType, "fuse") {
		return false
	}
	_, err := os.Stat(filepath.Join(e.Source, "kvfs.db"))
	return err == nil
}

// mountAt returns the topmost mount whose mount point is path (made
// absolute and, except for its last element, free of symbolic links: the
// last may be a dead mount that cannot be resolved).
func mountAt(path string) (mountEntry, bool, error) {
	p, err := cleanMountPath(path)
	if err != nil {
		return mountEntry{}, false, err
	}
	tab, err := mountTable()
	if err != nil {
		return mountEntry{}, false, err
	}
	for i := len(tab) - 1; i >= 0; i-- {
		if tab[i].Point == p {
			return tab[i], true, nil
		}
	}
	return mountEntry{}, false, nil
}

// storeMounts returns the kvfs mounts of the store in dir.
func storeMounts(dir string) []mountEntry {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	tab, err := mountTable()
	if err != nil {
		return nil
	}
	var out []mountEntry
	for _, e := range tab {
		if e.isKvfs() && (e.Source == real || e.Source == dir) {
			out = append(out, e)
		}
	}
	return out
}

// cleanMountPath makes path absolute and resolves the links of its parent
// directory, as the kernel records mount points.
func cleanMountPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("mount point %s: %w", path, err)
	}
	p := filepath.Join(parent, filepath.Base(abs))
	// The last element, if it is a link to a live directory, is resolved
	// too (a dead mount point cannot be, and is taken as it is).
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return p, nil
}

// isDeadMount reports whether err, from a stat of a mount point, says its
// FUSE daemon is gone: "transport endpoint is not connected" on Linux;
// macFUSE answers the requests of a mount it has marked dead (its daemon
// gone or unresponsive) with ENXIO, "device not configured" (its
// maintainer in macfuse/macfuse#1136); docs/MACOS.md's checklist confirms
// it for a killed daemon.
func isDeadMount(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || runtime.GOOS == "darwin" && errors.Is(err, syscall.ENXIO)
}

// mountContaining returns the topmost mount that path lies in: the mount
// whose point is the longest prefix of path (resolved, from its deepest
// ancestor that exists, so that a path still to be made is placed too).
func mountContaining(path string) (mountEntry, bool, error) {
	p, err := resolveExisting(path)
	if err != nil {
		return mountEntry{}, false, err
	}
	tab, err := mountTable()
	if err != nil {
		return mountEntry{}, false, err
	}
	best := -1
	for i, e := range tab {
		if pathUnder(p, e.Point) && (best < 0 || len(e.Point) >= len(tab[best].Point)) {
			best = i
		}
	}
	if best < 0 {
		return mountEntry{}, false, nil
	}
	return tab[best], true, nil
}

// resolveExisting makes path absolute and resolves the links of its
// deepest ancestor that exists (path itself if it does); the elements
// below it are kept as given.
func resolveExisting(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == "/" || p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// pathUnder reports whether p is dir or lies below it (both clean and
// absolute).
func pathUnder(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
