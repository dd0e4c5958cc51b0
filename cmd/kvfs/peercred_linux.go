package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvfs/kvfs/store"
)

// peerCred is the credentials of the process at the other end of the unix
// socket fd (SO_PEERCRED), with its supplementary groups from /proc.
func peerCred(fd uintptr) (*store.Cred, error) {
	u, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return nil, err
	}
	cr := &store.Cred{UID: u.Uid, GID: u.Gid}
	if u.Uid != 0 {
		cr.Groups = peerGroups(u)
	}
	return cr, nil
}

// peerGroups reads a peer's supplementary groups from /proc.
func peerGroups(u *syscall.Ucred) []uint32 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", u.Pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	var groups []uint32
	ids := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		ids[k] = strings.Fields(v)
	}
	// The process must still be the peer: its real and filesystem ids.
	if !slices.Contains(ids["Uid"], strconv.Itoa(int(u.Uid))) || !slices.Contains(ids["Gid"], strconv.Itoa(int(u.Gid))) {
		return nil
	}
	for _, g := range ids["Groups"] {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			groups = append(groups, uint32(n))
		}
	}
	return groups
}
