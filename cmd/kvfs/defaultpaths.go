package main

import (
	"errors"
	"path/filepath"
)

// The default store and mount point, for kvfs init and kvfs mount given
// no paths. They are those scripts/run has always used on Linux; on macOS
// they are where macOS keeps an application's data, which is also outside
// what Finder shows and, unlike ~/Documents, not synced by iCloud Drive.
//
//	$KVFS_STORE, $KVFS_MOUNT                   each, when set (as for scripts/run)
//	$XDG_DATA_HOME/kvfs/{store,mnt}            when XDG_DATA_HOME is an absolute path
//	~/.local/share/kvfs/{store,mnt}            Linux (XDG's default for XDG_DATA_HOME)
//	~/Library/Application Support/kvfs/{store,mnt}  macOS

// defaultPaths returns the default store directory and mount point on
// goos, given the environment (getenv) and the user's home directory.
func defaultPaths(goos string, getenv func(string) string, home string) (storeDir, mnt string, err error) {
	storeDir, mnt = getenv("KVFS_STORE"), getenv("KVFS_MOUNT")
	if storeDir != "" && mnt != "" {
		return storeDir, mnt, nil
	}
	var base string
	switch xdg := getenv("XDG_DATA_HOME"); {
	case filepath.IsAbs(xdg): // the XDG spec: a relative path is invalid, ignored
		base = filepath.Join(xdg, "kvfs")
	case home == "" || !filepath.IsAbs(home):
		return "", "", errors.New("no default store: $HOME is not set (give the paths, or set KVFS_STORE and KVFS_MOUNT)")
	case goos == "darwin":
		base = filepath.Join(home, "Library", "Application Support", "kvfs")
	default:
		base = filepath.Join(home, ".local", "share", "kvfs")
	}
	if storeDir == "" {
		storeDir = filepath.Join(base, "store")
	}
	if mnt == "" {
		mnt = filepath.Join(base, "mnt")
	}
	return storeDir, mnt, nil
}
