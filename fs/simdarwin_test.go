package fs

import (
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestDarwinPageCache: simulating macFUSE on Linux, every open keeps the
// kernel's pages (macFUSE ignores KEEP_CACHE and keeps them anyway),
// write opens included, unless the darwin decision purges them; and no
// flag Linux does not know (the purges) or FUSE 7.19 lacks (NOFLUSH)
// reaches the kernel.
func TestDarwinPageCache(t *testing.T) {
	pc := darwinPlatform().pageCache
	for _, c := range []struct {
		name string
		in   uint32
		want uint32
	}{
		{"read open, same version", openCacheFlags(pc, true) | fuse.FOPEN_NOFLUSH, fuse.FOPEN_KEEP_CACHE},
		{"read open, changed", openCacheFlags(pc, false) | fuse.FOPEN_NOFLUSH, 0},
		{"write open", 0, fuse.FOPEN_KEEP_CACHE},
		{"view", fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, fuse.FOPEN_KEEP_CACHE},
	} {
		if got := darwinPageCache(c.in); got != c.want {
			t.Errorf("%s: darwinPageCache(%#x) = %#x, want %#x", c.name, c.in, got, c.want)
		}
	}
	if linuxPlatform().notify == darwinPlatform().notify || darwinPlatform().notify {
		t.Errorf("notify: linux %v, darwin %v; want true, false", linuxPlatform().notify, darwinPlatform().notify)
	}
}
