package fs

import "github.com/kvfs/kvfs/store"

// xattrFlags says which bits of a setxattr request's flags ask for a
// create-only or a replace-only set on one kernel. Linux sends
// setxattr(2)'s XATTR_CREATE 0x1 and XATTR_REPLACE 0x2; macFUSE sends
// darwin's options as the caller gave them: XATTR_NOFOLLOW 0x1,
// XATTR_CREATE 0x2, XATTR_REPLACE 0x4 (sys/xattr.h). Read with Linux's
// values, darwin's NOFOLLOW would refuse to overwrite an attribute
// (EEXIST) and its CREATE would refuse to create one (ENOATTR).
type xattrFlags struct {
	create, replace uint32
}

func linuxXattrFlags() xattrFlags { return xattrFlags{create: 0x1, replace: 0x2} }
func darwinXattrFlags() xattrFlags {
	return xattrFlags{create: darwinXattrCreate, replace: darwinXattrReplace}
}

// darwin's XATTR_CREATE and XATTR_REPLACE (platform_darwin.go checks them).
const (
	darwinXattrCreate  = 0x2
	darwinXattrReplace = 0x4
)

// decodeSetxattr turns a request's flags into the store's (store.XattrCreate,
// store.XattrReplace). Other bits are dropped: darwin's XATTR_NOFOLLOW
// (kvfs has no symbolic links to follow) and the options darwin's kernel
// keeps to itself; Linux's kernel sends no others. Both create and
// replace are left to the store, as before: darwin's kernel refuses the
// pair itself (EINVAL).
func decodeSetxattr(flags uint32, enc xattrFlags) int {
	var out int
	if flags&enc.create != 0 {
		out |= store.XattrCreate
	}
	if flags&enc.replace != 0 {
		out |= store.XattrReplace
	}
	return out
}
