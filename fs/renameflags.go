package fs

import "syscall"

// renameEncoding says what the bits of a FUSE rename's flags mean on one
// kernel. Linux sends renameat2(2)'s flags (RENAME_NOREPLACE 0x1,
// RENAME_EXCHANGE 0x2, RENAME_WHITEOUT 0x4); macFUSE sends renamex_np(2)'s
// (RENAME_SWAP 0x2, RENAME_EXCL 0x4), and sends them at all only because
// go-fuse asks for FUSE_RENAME_SWAP at init. The same bit means different
// things: darwin's exclusive rename is Linux's whiteout, so reading
// darwin's flags with Linux's table would refuse every exclusive rename,
// and reading a future no-replace as 0x1 would replace a file that a
// Finder copy or a document save meant to keep (go-fuse issue #579: a
// save's swap taken for something else loses the document).
type renameEncoding struct {
	// noReplace fails the rename with EEXIST when the target exists.
	noReplace uint32
	// exchange swaps the two names; kvfs does not implement it.
	exchange uint32
	// exchangeErrno answers an exchange: EINVAL on Linux, as kvfs has
	// always answered there; ENOTSUP on darwin, renamex_np(2)'s answer
	// for a flag the volume does not support, after which a save falls
	// back to a plain rename.
	exchangeErrno syscall.Errno
}

// linuxRename is renameat2(2)'s encoding.
func linuxRename() renameEncoding {
	return renameEncoding{noReplace: 0x1, exchange: 0x2, exchangeErrno: syscall.EINVAL}
}

// darwinRename is renamex_np(2)'s encoding (sys/stdio.h: RENAME_SWAP,
// RENAME_EXCL), as macFUSE forwards it.
func darwinRename() renameEncoding {
	return renameEncoding{noReplace: 0x4, exchange: 0x2, exchangeErrno: syscall.ENOTSUP}
}

// decodeRename reads a rename request's flags: whether the rename must not
// replace an existing target, or the errno that refuses it. An exchange is
// refused with the platform's errno; any other bit (Linux's whiteout,
// darwin's RENAME_SECLUDE or RENAME_NOFOLLOW_ANY) with EINVAL, as one
// kvfs does not know.
func decodeRename(flags uint32, enc renameEncoding) (noReplace bool, errno syscall.Errno) {
	if flags&enc.exchange != 0 {
		return false, enc.exchangeErrno
	}
	if flags&^enc.noReplace != 0 {
		return false, syscall.EINVAL
	}
	return flags&enc.noReplace != 0, 0
}
