package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/store"
)

// mountHolder is a process that holds a mount busy, and how: the first
// thing of it found under the mount.
type mountHolder struct {
	PID  int
	Comm string // its command (/proc/PID/comm)
	How  string // "has P open", "maps P", "works in P", "has its root in P"
	Path string // P
}

// procHolders lists the processes of the proc filesystem at proc
// (/proc on Linux; none elsewhere) that hold something under the mount
// point mnt: an open descriptor, a mapped file, their working or root
// directory; self (kvfs unmount's own process) is left out. It reads
// only links and maps, which name paths without asking the mount's daemon.
// Processes it may not look into (another user's, when not root) are not
// seen.
func procHolders(proc, mnt string, self int) []mountHolder {
	under := func(p string) bool {
		p = strings.TrimSuffix(p, " (deleted)")
		return p == mnt || strings.HasPrefix(p, mnt+"/")
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var out []mountHolder
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		h := mountHolder{PID: pid}
		for _, l := range []struct{ link, how string }{{"cwd", "works in"}, {"root", "has its root in"}} {
			if t, err := os.Readlink(filepath.Join(dir, l.link)); err == nil && under(t) {
				h.How, h.Path = l.how, t
				break
			}
		}
		if h.How == "" {
			fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
			for _, fd := range fds {
				if t, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && under(t) {
					h.How, h.Path = "has open", t
					break
				}
			}
		}
		if h.How == "" {
			if p, ok := mapsUnder(filepath.Join(dir, "maps"), under); ok {
				h.How, h.Path = "maps", p
			}
		}
		if h.How == "" {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, "comm"))
		h.Comm = strings.TrimSpace(string(b))
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// mapsUnder returns the first mapped file of a /proc/PID/maps file that
// under accepts. A line is "address perms offset dev inode [path]", the
// path after padding; it may contain spaces.
func mapsUnder(maps string, under func(string) bool) (string, bool) {
	f, err := os.Open(maps)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest := sc.Text()
		for i := 0; i < 5; i++ {
			_, rest, _ = strings.Cut(strings.TrimLeft(rest, " "), " ")
		}
		if p := strings.TrimLeft(rest, " "); strings.HasPrefix(p, "/") && under(p) {
			return p, true
		}
	}
	return "", false
}

// maxHoldersNamed bounds the processes a busy mount's error names.
const maxHoldersNamed = 8

// describeHolders says who holds a mount, for an error: "PID 12 (sleep)
// has /m/f open; PID 13 (sh) works in /m/d".
func describeHolders(hs []mountHolder) string {
	var parts []string
	for i, h := range hs {
		if i == maxHoldersNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(hs)-i))
			break
		}
		comm := h.Comm
		if comm == "" {
			comm = "?"
		}
		if h.How == "has open" {
			parts = append(parts, fmt.Sprintf("PID %d (%s) has %s open", h.PID, comm, h.Path))
		} else {
			parts = append(parts, fmt.Sprintf("PID %d (%s) %s %s", h.PID, comm, h.How, h.Path))
		}
	}
	return strings.Join(parts, "; ")
}

// lockHolder names the process that holds a lock on the file at path,
// from the proc filesystem at proc (/proc/locks; Linux): "PID 12 (kvfs
// mount --foreground /s /m)", or "" if none is found. The store's lock
// is bbolt's flock of kvfs.db.
func lockHolder(proc, path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(proc, "locks"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 26901 fe:00:5349409 0 EOF"; a
		// waiter's line has "->" after the number.
		f := strings.Fields(line)
		if len(f) < 6 || f[1] == "->" {
			continue
		}
		dev := strings.Split(f[5], ":")
		if len(dev) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(dev[0], 16, 32)
		min, err2 := strconv.ParseUint(dev[1], 16, 32)
		ino, err3 := strconv.ParseUint(dev[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || ino != uint64(st.Ino) ||
			uint32(maj) != unix.Major(uint64(st.Dev)) || uint32(min) != unix.Minor(uint64(st.Dev)) {
			continue
		}
		pid, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(proc, f[4], "cmdline"))
		what := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		if what == "" {
			c, _ := os.ReadFile(filepath.Join(proc, f[4], "comm"))
			what = strings.TrimSpace(string(c))
		}
		if what == "" {
			return fmt.Sprintf("PID %d", pid)
		}
		return fmt.Sprintf("PID %d (%s)", pid, what)
	}
	return ""
}

// inUseBy adds to err, if it is the store's lock held by another process
// (store.ErrInUse), who holds it.
func inUseBy(dir string, err error) error {
	if !errors.Is(err, store.ErrInUse) {
		return err
	}
	if who := lockHolder("/proc", filepath.Join(dir, "kvfs.db")); who != "" {
		return fmt.Errorf("%w; its lock is held by %s", err, who)
	}
	return err
}
