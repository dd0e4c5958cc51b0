package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mountTable reads /proc/self/mountinfo: the mounts this process sees, in
// the order they were made (a later one over an earlier one at the same
// point hides it).
func mountTable() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	defer f.Close()
	var tab []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseMountinfo(sc.Text()); ok {
			tab = append(tab, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	return tab, nil
}

// parseMountinfo parses one line of mountinfo (proc(5)): "36 35 98:0
// /root /mnt opts [optional fields] - fstype source superopts".
func parseMountinfo(line string) (mountEntry, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return mountEntry{}, false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 5 || len(b) < 2 {
		return mountEntry{}, false
	}
	return mountEntry{Point: unescapeMount(a[4]), FSType: b[0], Source: unescapeMount(b[1])}, true
}

// unescapeMount undoes the kernel's octal escapes of space, tab, newline
// and backslash in mount table fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
