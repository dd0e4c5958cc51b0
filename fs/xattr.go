package fs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/kvfs/kvfs/mlx"
	"github.com/kvfs/kvfs/store"
)

// virtualXattr computes one of the user.kvfs.* attributes.
func (n *node) virtualXattr(name string) ([]byte, error) {
	ino := n.ino.Load()
	fi, err := n.fsys.s.StatIno(ino)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() && name != store.PinXattr {
		// A directory has none (listxattr shows none): before, some read
		// as empty or 0 and stored_bytes failed with ESTALE.
		return nil, store.ErrNoAttr
	}
	switch name {
	case store.PinXattr:
		// The one user.kvfs.* attribute that is stored, not computed.
		return n.fsys.s.Xattr(ino, name)
	case "user.kvfs.kind":
		return []byte(fi.Kind), nil
	case "user.kvfs.manifest":
		return []byte(fi.ManifestID), nil
	case "user.kvfs.damaged":
		// Byte ranges kvfs fsck --repair marked lost: "START-END,...".
		rs, err := n.fsys.s.Damage(ino)
		if err != nil {
			return nil, err
		}
		return []byte(store.FormatRanges(rs)), nil
	case "user.kvfs.logical_bytes":
		return []byte(fmt.Sprint(fi.Size)), nil
	case "user.kvfs.stored_bytes", "user.kvfs.shared_bytes":
		u, err := n.fsys.s.Usage(ino)
		if err != nil {
			return nil, err
		}
		if name == "user.kvfs.stored_bytes" {
			return []byte(fmt.Sprint(u.Stored)), nil
		}
		return []byte(fmt.Sprint(u.Shared)), nil
	case "user.kvfs.parent":
		// The file whose rows this one shares (store.RowParent): its
		// path below the mount's root, and the tokens they share.
		p, common, err := n.fsys.s.RowParent(ino)
		if err != nil {
			return nil, store.ErrNoAttr
		}
		return []byte(fmt.Sprintf("/%s %d", p, common)), nil
	case "user.kvfs.format", "user.kvfs.model", "user.kvfs.tokens":
		if fi.Kind != "mlxkv" {
			return nil, store.ErrNoAttr
		}
		f, err := n.fsys.s.OpenIno(ino)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		snap, err := mlx.Parse(f, f.Size(), fi.Name)
		if err != nil {
			return nil, store.ErrNoAttr
		}
		switch name {
		case "user.kvfs.format":
			return []byte(fmt.Sprint(snap.Header.FormatVersion)), nil
		case "user.kvfs.model":
			return []byte(snap.Header.ModelID), nil
		}
		return []byte(fmt.Sprint(len(snap.Header.Tokens))), nil
	}
	return nil, store.ErrNoAttr
}

var virtualNames = []string{"user.kvfs.kind", "user.kvfs.manifest", "user.kvfs.logical_bytes", "user.kvfs.stored_bytes", "user.kvfs.shared_bytes"}
var snapshotNames = []string{"user.kvfs.format", "user.kvfs.model", "user.kvfs.tokens"}

// copyOut follows the getxattr/listxattr protocol: a zero-length buffer
// asks for the size; a short one is ERANGE.
func copyOut(v []byte, dest []byte) (uint32, syscall.Errno) {
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	var v []byte
	var err error
	if strings.HasPrefix(attr, kvfsPrefix) {
		v, err = n.virtualXattr(attr)
	} else {
		v, err = n.fsys.s.Xattr(n.ino.Load(), attr)
	}
	if err != nil {
		return 0, n.stale("getxattr", err)
	}
	return copyOut(v, dest)
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, err := n.fsys.s.Xattrs(n.ino.Load())
	if err != nil {
		return 0, n.stale("listxattr", err)
	}
	if fi, err := n.fsys.s.StatIno(n.ino.Load()); err == nil && !fi.IsDir() {
		names = append(names, virtualNames...)
		if fi.Kind == "mlxkv" {
			names = append(names, snapshotNames...)
		}
		if _, _, err := n.fsys.s.RowParent(n.ino.Load()); err == nil {
			names = append(names, "user.kvfs.parent")
		}
		if _, err := n.fsys.s.Damage(n.ino.Load()); err == nil {
			names = append(names, "user.kvfs.damaged")
		}
	}
	var b []byte
	for _, s := range names {
		b = append(append(b, s...), 0)
	}
	return copyOut(b, dest)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if err := checkSettable(attr, hostPlatform().xattrNames); err != nil {
		if errors.Is(err, store.ErrReadOnly) {
			return syscall.EPERM
		}
		return syscall.ENOTSUP
	}
	if attr == store.PinXattr && !n.fsys.mayPin(ctx) {
		return syscall.EPERM
	}
	if data == nil {
		data = []byte{}
	}
	return n.stale("setxattr", n.fsys.s.SetXattr(n.ino.Load(), attr, data, decodeSetxattr(flags, hostPlatform().xattrFlags)))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if err := checkSettable(attr, hostPlatform().xattrNames); err != nil {
		if errors.Is(err, store.ErrReadOnly) {
			return syscall.EPERM
		}
		return hostPlatform().noAttr
	}
	if attr == store.PinXattr && !n.fsys.mayPin(ctx) {
		return syscall.EPERM
	}
	return n.stale("removexattr", n.fsys.s.SetXattr(n.ino.Load(), attr, nil, 0))
}

// mayPin reports whether the caller may pin or unpin a file: the store's
// owner or root, as kvfs pin (through the owner's control socket) and
// kvfs config. Pins decide whose files the capacity evicts: a user who
// could pin their own files would push eviction onto everyone else's,
// and a file's owner could unpin what the store's owner pinned (red
// team, F4). Write permission on the file, which the kernel checks for
// user.* attributes, is not enough.
func (fsys *FS) mayPin(ctx context.Context) bool {
	c := cred(ctx)
	return c == nil || c.UID == 0 || c.UID == fsys.s.Owner().UID
}
