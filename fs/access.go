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

// cred is the caller of a FUSE request, for the permission checks the
// store makes itself (store.Cred): the kernel checks everything the caller
// walks to, but not the files a blob's hash reaches. nil outside a
// request: the daemon itself.
//
// FUSE passes the caller's uid, gid and pid only; the supplementary groups
// are read from /proc/<pid>/status. If the caller is gone, it has no
// supplementary groups (a narrower answer, never a wider one).
func cred(ctx context.Context) *store.Cred {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	cr := &store.Cred{UID: c.Uid, GID: c.Gid}
	if c.Uid != 0 && c.Pid != 0 {
		cr.Groups, _ = procGroups(fmt.Sprintf("/proc/%d/status", c.Pid))
	}
	return cr
}

// procGroups reads the "Groups:" line of a /proc/<pid>/status file.
func procGroups(path string) ([]uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var gs []uint32
		for _, g := range strings.Fields(rest) {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("read groups in %s: %w", path, err)
			}
			gs = append(gs, uint32(n))
		}
		return gs, nil
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read groups in %s: %w", path, err)
	}
	return nil, nil
}
