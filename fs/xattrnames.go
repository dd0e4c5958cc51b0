package fs

import (
	"errors"
	"strings"

	"github.com/kvfs/kvfs/store"
)

// xattrNames is which attribute names a platform's callers may store.
type xattrNames int

const (
	// userNames: Linux has namespaces, and kvfs stores user.* only;
	// trusted.*, security.* and system.* mean something to the kernel
	// or to root that kvfs does not provide.
	userNames xattrNames = iota
	// anyNames: macOS has no namespaces, and Finder, Gatekeeper,
	// Spotlight and document saves set com.apple.* attributes
	// (FinderInfo, quarantine, metadata:*, lastuseddate#PS, ...).
	// Refusing one with ENOTSUP (or ENOSYS) makes the VFS keep it in
	// an AppleDouble ._ file beside the file instead, in the engine's
	// cache directory, or fail where the mount says noappledouble.
	anyNames
)

// kvfsPrefix names the read-only attributes kvfs computes for each file.
const kvfsPrefix = "user.kvfs."

// checkSettable says whether a caller may set or remove the attribute
// name: store.ErrReadOnly for the user.kvfs.* attributes kvfs computes
// (all but user.kvfs.pin, which pins a file against eviction:
// store/keep.go), errUnsupportedName for a name the platform's policy
// does not store. Within the policy every name is stored, within the
// store's limits (store.MaxXattrValue and the per-file totals).
func checkSettable(attr string, names xattrNames) error {
	switch {
	case attr == store.PinXattr:
		return nil
	case strings.HasPrefix(attr, kvfsPrefix):
		return store.ErrReadOnly
	case names == userNames && !strings.HasPrefix(attr, "user."):
		return errUnsupportedName
	}
	return nil
}

// errUnsupportedName is a name outside the platform's stored names.
var errUnsupportedName = errors.New("only user.* attributes are supported")
