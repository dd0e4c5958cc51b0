package main

import "syscall"

// detachFlag makes unmount(2) detach a busy mount (MNT_DETACH).
const detachFlag = syscall.MNT_DETACH
