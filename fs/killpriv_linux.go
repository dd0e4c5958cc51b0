package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// killprivCap is FUSE_HANDLE_KILLPRIV_V2 (1<<28 in the kernel's
// include/uapi/linux/fuse.h): the daemon clears the set-ID bits that a
// write, truncate or chown must clear (killPrivs), and in return the kernel
// stops asking for security.capability before every write(2).
const killprivCap = fuse.CAP_HANDLE_KILLPRIV_V2
