package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// An empty store is not small: it keeps a disk space reserve (STORE/reserve,
// so that files can be removed on a full disk: store/reserve.go) and a
// journal of preallocated segments (STORE/journal). Both are sized by the
// filesystem (1/32 of it up to 128 MiB, two segments of 1/64 up to 64 MiB
// each), so a store on a filesystem of 4 GiB or more takes 257 MiB before
// its first file. kvfs init and kvfs stats say so.

// footprint is the disk space a store's files take, by kind: allocated
// blocks, not lengths.
type footprint struct {
	Total   int64 `json:"total"`
	Packs   int64 `json:"packs"`
	Index   int64 `json:"index"`   // kvfs.db
	Journal int64 `json:"journal"` // journal/, preallocated
	Reserve int64 `json:"reserve"` // reserve, kept for removals on a full disk
	Other   int64 `json:"other"`   // spool, log, ...
}

// storeFootprint adds up the allocated blocks of the files in the store
// directory dir, by kind.
func storeFootprint(dir string) (footprint, error) {
	var f footprint
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil // their own blocks are not what a store takes
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		n := int64(st.Blocks) * 512
		rel, _ := filepath.Rel(dir, p)
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		switch top {
		case "packs":
			f.Packs += n
		case "kvfs.db":
			f.Index += n
		case "journal":
			f.Journal += n
		case "reserve":
			f.Reserve += n
		default:
			f.Other += n
		}
		f.Total += n
		return nil
	})
	return f, err
}

// String is the footprint for kvfs stats.
func (f footprint) String() string {
	return fmt.Sprintf("%s: packs %s, index %s, journal %s (preallocated), reserve %s (kept so that files can be removed on a full disk)",
		formatBytes(f.Total), formatBytes(f.Packs), formatBytes(f.Index), formatBytes(f.Journal), formatBytes(f.Reserve))
}

// emptyFootprint says what a new store in dir takes, for kvfs init:
// its reserve as made, and the journal its first use preallocates.
func emptyFootprint(dir string, journal int64) string {
	f, _ := storeFootprint(dir)
	if fi, err := os.Stat(filepath.Join(dir, "reserve")); err == nil && f.Reserve == 0 {
		f.Reserve = fi.Size()
	}
	msg := fmt.Sprintf("on disk: %s while empty: a reserve of %s, kept so that files can be removed on a full disk, and, from its first use, a journal of %s, preallocated",
		formatBytes(f.Total+journal), formatBytes(f.Reserve), formatBytes(journal))
	if f.Reserve >= 128<<20 {
		msg += " (both are smaller on filesystems under 4 GiB)"
	}
	return msg
}
