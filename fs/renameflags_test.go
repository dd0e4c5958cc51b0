package fs

import (
	"syscall"
	"testing"
)

// TestDecodeRename reads both kernels' flags with their own tables: on
// darwin 0x4 is the exclusive rename (no replace) and 0x2 the swap, which
// kvfs refuses with ENOTSUP so that a save falls back to a plain rename;
// on Linux 0x1 is no-replace, and the exchange and any unknown bit are
// EINVAL, as before.
func TestDecodeRename(t *testing.T) {
	linux, darwin := linuxRename(), darwinRename()
	cases := []struct {
		name      string
		enc       renameEncoding
		flags     uint32
		noReplace bool
		errno     syscall.Errno
	}{
		{"linux plain", linux, 0, false, 0},
		{"linux RENAME_NOREPLACE", linux, 0x1, true, 0},
		{"linux RENAME_EXCHANGE", linux, 0x2, false, syscall.EINVAL},
		{"linux RENAME_EXCHANGE|RENAME_NOREPLACE", linux, 0x3, false, syscall.EINVAL},
		{"linux RENAME_WHITEOUT", linux, 0x4, false, syscall.EINVAL},
		{"linux RENAME_NOREPLACE|RENAME_WHITEOUT", linux, 0x5, false, syscall.EINVAL},
		{"linux unknown high bit", linux, 1 << 31, false, syscall.EINVAL},

		{"darwin plain rename(2)", darwin, 0, false, 0},
		{"darwin RENAME_EXCL", darwin, 0x4, true, 0},
		{"darwin RENAME_SWAP", darwin, 0x2, false, syscall.ENOTSUP},
		{"darwin RENAME_SWAP|RENAME_EXCL", darwin, 0x6, false, syscall.ENOTSUP},
		{"darwin RENAME_SECLUDE", darwin, 0x1, false, syscall.EINVAL},
		{"darwin RENAME_EXCL|RENAME_SECLUDE", darwin, 0x5, false, syscall.EINVAL},
		{"darwin RENAME_NOFOLLOW_ANY", darwin, 0x10, false, syscall.EINVAL},
	}
	for _, c := range cases {
		noReplace, errno := decodeRename(c.flags, c.enc)
		if noReplace != c.noReplace || errno != c.errno {
			t.Errorf("%s (%#x): noReplace %v, errno %v; want %v, %v", c.name, c.flags, noReplace, errno, c.noReplace, c.errno)
		}
	}
}
