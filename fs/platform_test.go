package fs

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kvfs/kvfs/store"
)

// TestHostPlatform: the build's policy is its kernel's, so that Linux
// keeps its answers (checked here) and darwin gets macFUSE's.
func TestHostPlatform(t *testing.T) {
	want := darwinPlatform()
	if runtime.GOOS == "linux" {
		want = linuxPlatform()
	}
	if got := hostPlatform(); !reflect.DeepEqual(got, want) {
		t.Errorf("hostPlatform() = %+v, want %+v", got, want)
	}
}

// TestOpenCacheFlags: an open keeps the kernel's pages of the version it
// opens and drops older ones; on macFUSE, which ignores KEEP_CACHE, by
// purging pages and attributes. No answer is direct I/O (mmap).
func TestOpenCacheFlags(t *testing.T) {
	cases := []struct {
		name string
		pc   pageCache
		same bool
		want uint32
	}{
		{"linux same version", linuxPlatform().pageCache, true, fuse.FOPEN_KEEP_CACHE},
		{"linux changed", linuxPlatform().pageCache, false, 0},
		{"darwin same version", darwinPlatform().pageCache, true, fuse.FOPEN_KEEP_CACHE},
		{"darwin changed", darwinPlatform().pageCache, false, 1<<31 | 1<<30},
	}
	for _, c := range cases {
		got := openCacheFlags(c.pc, c.same)
		if got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
		if got&fuse.FOPEN_DIRECT_IO != 0 {
			t.Errorf("%s: direct I/O (%#x)", c.name, got)
		}
		if got&fopenPurgeAttr != 0 && got&fopenPurgeUBC == 0 {
			t.Errorf("%s: PURGE_ATTR without PURGE_UBC, which macFUSE ignores (%#x)", c.name, got)
		}
	}
}

// TestCheckSettable: on macOS every name is stored, com.apple.* included
// (else the VFS writes ._ files); on Linux only user.*; on both the
// computed user.kvfs.* are read-only and user.kvfs.pin is stored.
func TestCheckSettable(t *testing.T) {
	stored, readOnly, unsupported := error(nil), store.ErrReadOnly, errUnsupportedName
	cases := []struct {
		name  string
		linux error
		mac   error
	}{
		{"user.comment", stored, stored},
		{"user.xdg.origin.url", stored, stored},
		{store.PinXattr, stored, stored},
		{"user.kvfs.kind", readOnly, readOnly},
		{"user.kvfs.stored_bytes", readOnly, readOnly},
		{"com.apple.FinderInfo", unsupported, stored},
		{"com.apple.quarantine", unsupported, stored},
		{"com.apple.metadata:kMDItemWhereFroms", unsupported, stored},
		{"com.apple.metadata:_kMDItemUserTags", unsupported, stored},
		{"com.apple.lastuseddate#PS", unsupported, stored},
		{"com.apple.ResourceFork", unsupported, stored},
		{"com.apple.provenance", unsupported, stored},
		{"org.example.app", unsupported, stored},
		{"trusted.overlay.opaque", unsupported, stored},
		{"security.capability", unsupported, stored},
	}
	for _, c := range cases {
		for _, p := range []struct {
			os    string
			names xattrNames
			want  error
		}{{"linux", linuxPlatform().xattrNames, c.linux}, {"darwin", darwinPlatform().xattrNames, c.mac}} {
			if err := checkSettable(c.name, p.names); !errors.Is(err, p.want) || (err == nil) != (p.want == nil) {
				t.Errorf("%s on %s: %v, want %v", c.name, p.os, err, p.want)
			}
		}
	}
}

// TestNoAttrErrno: a missing attribute is ENODATA on Linux and ENOATTR
// (93) on macOS, where ENODATA (96) means something else.
func TestNoAttrErrno(t *testing.T) {
	if e := linuxPlatform().noAttr; e != syscall.ENODATA {
		t.Errorf("linux: %d, want ENODATA", e)
	}
	if e := darwinPlatform().noAttr; e != 93 {
		t.Errorf("darwin: %d, want 93 (ENOATTR)", e)
	}
}

// TestDecodeAllocate reads both platforms' modes with their own tables
// (darwin's 0x2 is ALLOCATECONTIG, Linux's PUNCH_HOLE); every request is
// answered ENOTSUP.
func TestDecodeAllocate(t *testing.T) {
	linux, darwin := linuxPlatform().alloc, darwinPlatform().alloc
	cases := []struct {
		name string
		bits []allocBit
		mode uint32
		want string
	}{
		{"linux posix_fallocate", linux, 0, "allocate"},
		{"linux keep size", linux, 0x1, "KEEP_SIZE"},
		{"linux punch hole", linux, 0x3, "KEEP_SIZE|PUNCH_HOLE"},
		{"linux zero range", linux, 0x10, "ZERO_RANGE"},
		{"linux collapse", linux, 0x8, "COLLAPSE_RANGE"},
		{"linux insert", linux, 0x20, "INSERT_RANGE"},
		{"linux unknown bit", linux, 0x1000, "0x1000"},
		{"darwin F_PREALLOCATE", darwin, 0x1, "PREALLOCATE"},
		{"darwin contiguous, all, from EOF", darwin, 0x1 | 0x2 | 0x4 | 0x10, "PREALLOCATE|ALLOCATECONTIG|ALLOCATEALL|ALLOCATEFROMPEOF"},
		{"darwin from volume offset, persist", darwin, 0x1 | 0x8 | 0x20, "PREALLOCATE|ALLOCATEPERSIST|ALLOCATEFROMVOL"},
		{"darwin contiguous is not a punch", darwin, 0x2, "ALLOCATECONTIG"},
		{"darwin unknown bit", darwin, 0x1 | 0x400, "PREALLOCATE|0x400"},
	}
	for _, c := range cases {
		what, e := decodeAllocate(c.mode, c.bits)
		if what != c.want || e != syscall.ENOTSUP {
			t.Errorf("%s (%#x): %q, %v; want %q, ENOTSUP", c.name, c.mode, what, e, c.want)
		}
		if strings.Contains(what, "PUNCH") && c.bits[0].name != "KEEP_SIZE" {
			t.Errorf("%s: a darwin mode read as a punch", c.name)
		}
	}
}

// TestDecodeSetxattr reads both kernels' setxattr flags into the store's:
// darwin's XATTR_NOFOLLOW (0x1) is not Linux's XATTR_CREATE, and darwin's
// XATTR_CREATE (0x2) is not Linux's XATTR_REPLACE.
func TestDecodeSetxattr(t *testing.T) {
	linux, darwin := linuxPlatform().xattrFlags, darwinPlatform().xattrFlags
	const create, replace = store.XattrCreate, store.XattrReplace
	cases := []struct {
		name  string
		enc   xattrFlags
		flags uint32
		want  int
	}{
		{"linux 0", linux, 0, 0},
		{"linux XATTR_CREATE", linux, 0x1, create},
		{"linux XATTR_REPLACE", linux, 0x2, replace},
		{"linux both", linux, 0x3, create | replace},
		{"darwin 0", darwin, 0, 0},
		{"darwin XATTR_NOFOLLOW", darwin, 0x1, 0},
		{"darwin XATTR_CREATE", darwin, 0x2, create},
		{"darwin XATTR_REPLACE", darwin, 0x4, replace},
		{"darwin XATTR_NOFOLLOW|XATTR_CREATE", darwin, 0x3, create},
		{"darwin XATTR_NOFOLLOW|XATTR_REPLACE", darwin, 0x5, replace},
		{"darwin XATTR_SHOWCOMPRESSION", darwin, 0x20, 0},
	}
	for _, c := range cases {
		if got := decodeSetxattr(c.flags, c.enc); got != c.want {
			t.Errorf("%s (%#x): %#x, want %#x", c.name, c.flags, got, c.want)
		}
	}
}
