package fs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// sha256Hex is the length of a blob's name: only such a name can be one
// (the store decides), so only its lookups need the caller's credentials.
const sha256Hex = 64

// cred is the caller of a FUSE request, for the permission checks the
// store makes itself (store.Cred): the kernel checks everything the caller
// walks to, but not the files a blob's hash reaches. nil outside a
// request: the daemon itself.
//
// FUSE passes the caller's uid, gid and pid only; the supplementary groups
// are read from /proc/<pid>/status, if that process still has the caller's
// filesystem uid and gid (not another process that took the pid, or one
// of another pid namespace). Otherwise the caller has no supplementary
// groups: a narrower answer, never a wider one.
// CallerCred is the credentials of a request's caller (cred), for
// another filesystem's checks (a pool mount's /.kvfs tree).
func CallerCred(ctx context.Context) *store.Cred { return cred(ctx) }

func cred(ctx context.Context) *store.Cred {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	cr := &store.Cred{UID: c.Uid, GID: c.Gid}
	if c.Uid != 0 && c.Pid != 0 {
		cr.Groups, _ = procGroups(fmt.Sprintf("/proc/%d/status", c.Pid), c.Uid, c.Gid)
	}
	return cr
}

// procGroups reads the supplementary groups ("Groups:") of a
// /proc/<pid>/status file, if its filesystem uid and gid (the last fields
// of "Uid:" and "Gid:") are uid and gid; nil otherwise.
func procGroups(path string, uid, gid uint32) ([]uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var groups []uint32
	uidOK, gidOK := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, _ := strings.Cut(sc.Text(), ":")
		ids := parseIDs(rest)
		switch key {
		case "Uid":
			uidOK = len(ids) == 4 && ids[3] == uid
		case "Gid":
			gidOK = len(ids) == 4 && ids[3] == gid
		case "Groups":
			groups = ids
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !uidOK || !gidOK {
		return nil, nil
	}
	return groups, nil
}

// parseIDs parses a status line's list of numbers; other lines (names,
// masks) are not lists of ids, and give nil.
func parseIDs(s string) []uint32 {
	var ids []uint32
	for _, f := range strings.Fields(s) {
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil
		}
		ids = append(ids, uint32(n))
	}
	return ids
}
