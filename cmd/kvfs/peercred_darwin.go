package main

import (
	"golang.org/x/sys/unix"

	"github.com/kvfs/kvfs/store"
)

// peerCred is the credentials of the process at the other end of the unix
// socket fd (LOCAL_PEERCRED: its effective uid and groups, the first of
// which is its effective gid).
func peerCred(fd uintptr) (*store.Cred, error) {
	x, err := unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return nil, err
	}
	n := min(int(x.Ngroups), len(x.Groups))
	cr := &store.Cred{UID: x.Uid}
	if n > 0 {
		cr.GID = x.Groups[0]
		cr.Groups = append([]uint32(nil), x.Groups[1:n]...)
	}
	return cr, nil
}
